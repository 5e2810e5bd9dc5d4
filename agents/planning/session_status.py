"""What a thread's agent session shows while a plan works: processing, suspended, closed.

Decided from the orchestrator's own step statuses (never from the model), so Slack's session
status, the fallback status line and the plan card always say the same thing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from flotilla.agents.planning.plan import TERMINAL_PLAN, USER, Plan

SessionStatus = Literal["processing", "suspended", "closed"]


def session_status(plan: Plan, now: datetime) -> SessionStatus:
    """`processing` while a run is in flight, `suspended` while the plan waits (for a
    person's answer, a retry's backoff or its turn), `closed` once it has ended."""
    if plan.status in TERMINAL_PLAN:
        return "closed"
    for step in plan.steps:
        if step.status != "in_progress" or step.assignee == USER:
            continue
        if step.not_before is None or step.not_before <= now:
            return "processing"
    return "suspended"


def waiting_for_a_person(plan: Plan) -> bool:
    """Whether the plan waits on a person: a form, or an agent's question."""
    return any(
        (s.status == "in_progress" and s.assignee == USER) or s.status == "blocked"
        for s in plan.steps
    )


def activity(plan: Plan, now: datetime) -> str:
    """The session status in words, for the plan card and the fallback status line."""
    status = session_status(plan, now)
    if status == "processing":
        return "working"
    if status == "closed":
        return "finished"
    return "waiting for a person" if waiting_for_a_person(plan) else "waiting"
