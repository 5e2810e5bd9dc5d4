"""The reconciler: decide (pure) what a conversation's plan does next, then store it.

`decide(plan, now, outcomes=…, operations=…)` is a pure function from the stored plan and
what just happened to the new plan and the effects to perform. `Reconciler.reconcile`
is the thin async layer around it: under the conversation's lock it de-duplicates the
event, loads the plan, decides, and stores the changed steps and the effects (outbox
rows) in one transaction; the effects are performed after commit (`agents/outbox.py`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from agents.plan import (
    Outcome,
    Plan,
    Step,
)
from agents.plan_operations import Operation, apply_operation
from agents.plan_ops import apply_outcome, dispatch, with_status
from agents.ports import Effect


@dataclass(frozen=True, slots=True)
class Decision:
    """What one reconcile decided: the new plan, the rows to write, the effects."""

    before: Plan | None
    plan: Plan
    effects: list[Effect] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.before is None or self.plan is not self.before

    def changed_steps(self) -> list[Step]:
        """Steps whose stored row must be written (changed or added)."""
        old = self.before.steps if self.before is not None else ()
        return [s for i, s in enumerate(self.plan.steps) if i >= len(old) or s is not old[i]]


def decide(
    plan: Plan,
    now: datetime,
    *,
    outcomes: Sequence[Outcome] = (),
    operations: Sequence[Operation] = (),
    assignees: Collection[str] = (),
    disabled: Collection[str] = (),
) -> Decision:
    """Apply commander operations, then outcomes, then choose dispatches. Pure.

    Nothing new (or only stale/repeated outcomes) gives a decision with the same plan
    and no effects. A change bumps the plan's version and adds one plan-card refresh.
    Raises `OperationRejected`/`PlanValidationError` for an operation that is not allowed.
    """
    current = plan
    effects: list[Effect] = []
    for op in operations:
        current = apply_operation(current, op, assignees=assignees, disabled=disabled)
    for outcome in outcomes:
        current, more = apply_outcome(current, outcome, now)
        effects.extend(more)
    current, more = dispatch(current, now)
    effects.extend(more)
    if current is plan:
        return Decision(plan, plan)
    return _versioned(plan, current, effects)


def _versioned(before: Plan | None, plan: Plan, effects: list[Effect]) -> Decision:
    version = (before.version if before is not None else plan.version) + 1
    plan = plan.model_copy(update={"version": version})
    card = Effect(
        f"plan:{plan.id}:card:v{version}",
        "update_plan_card",
        plan.conversation_id,
        {"plan_id": plan.id, "version": version},
    )
    return Decision(before, plan, [*effects, card])


def start(plan: Plan, now: datetime) -> Decision:
    """A freshly stored plan (version 0): dispatch its first step(s). Pure."""
    current, effects = dispatch(with_status(plan), now)
    return _versioned(None, current, effects)


def utcnow() -> datetime:
    return datetime.now(UTC)
