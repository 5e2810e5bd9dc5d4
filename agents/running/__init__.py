"""Running: one attempt of a step or of a commander turn – the job under its lease, the slot
request, the pydantic-ai run (crash-safe session, resumable tools), the commander's turns,
and the report of the outcome to the reconciler.

Imports every stage below it; never `agents.delivering`.
"""
