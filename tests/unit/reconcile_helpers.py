"""Literal plans and small drivers for the pure plan/reconcile tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from flotilla.agents.planning.effects import Effect
from flotilla.agents.planning.plan import Plan, PlanProposal, StepProposal, StepSucceeded, new_steps
from flotilla.agents.planning.plan_transitions import dispatch

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
AGENTS = ("researcher", "writer")


def proposal(*steps: dict[str, Any]) -> PlanProposal:
    """Steps given as dicts; index defaults to the position, assignee to researcher."""
    out = []
    for i, spec in enumerate(steps, start=1):
        data = {"index": i, "title": f"step {i}", "assignee": "researcher"} | spec
        out.append(StepProposal.model_validate(data))
    return PlanProposal(steps=out)


def make_plan(*steps: dict[str, Any], max_parallel: int = 1, request: str = "req") -> Plan:
    return Plan(
        id=7,
        conversation_id=3,
        max_parallel=max_parallel,
        request=request,
        steps=new_steps(proposal(*steps)),
    )


def chain(n: int, **kw: Any) -> Plan:
    return make_plan(*({} for _ in range(n)), **kw)


def diamond(**kw: Any) -> Plan:
    """1 -> (2, 3) -> 4."""
    return make_plan({}, {"wait_for": [1]}, {"wait_for": [1]}, {"wait_for": [2, 3]}, **kw)


def fan_out(width: int, **kw: Any) -> Plan:
    """1 -> (2..width+1)."""
    return make_plan({}, *({"wait_for": [1]} for _ in range(width)), **kw)


def fan_in(width: int, **kw: Any) -> Plan:
    """(1..width) -> width+1."""
    return make_plan(
        *({"wait_for": []} for _ in range(width)),
        {"wait_for": list(range(1, width + 1))},
        **kw,
    )


def started(plan: Plan) -> tuple[Plan, list[Effect]]:
    return dispatch(plan, T0)


def in_progress(plan: Plan) -> list[int]:
    return [s.index for s in plan.steps if s.status == "in_progress"]


def succeed(plan: Plan, index: int, summary: str = "ok") -> StepSucceeded:
    step = plan.steps[index - 1]
    return StepSucceeded(index=index, attempt=step.attempts, summary=summary)


def statuses(plan: Plan) -> str:
    """One letter per step: p(ending) i(n progress) d(one) f(ailed) s(kipped) b(locked)."""
    return "".join(s.status[0] if s.status != "in_progress" else "i" for s in plan.steps)
