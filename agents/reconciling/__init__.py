"""Reconciling: a conversation's plan advanced under its lock – the inbox records what people
write, the reconciler reads, decides (`planning.decisions`) and stores the plan and its
effects in one transaction, and the outbox sender delivers the effects after commit
through the Slack port.

Imports `agents.core`, `agents.planning`, `agents.tools`.
"""
