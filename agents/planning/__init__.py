"""Planning: what a plan is and what it does next, all pure – the plan model, validation of
proposed plans, transitions (readiness, outcomes, failure policies), the reconcile's
`decide`, the commander's operations, and the typed effects a decision asks for.

Imports `agents.core` only; never `storage/` (the mapping to rows in `plan_store` takes rows).
"""
