"""The pure decision of a reconcile: what a conversation's plan does next.

`decide(plan, now, outcomes=…, operations=…)` is a pure function from the stored plan and
what just happened to the new plan and the effects to perform; `start` dispatches a new
plan's first steps, `decide_agent_gone` fails the steps of an agent that went away. The
reconciler (`agents/reconciling/reconciler.py`) runs them inside its units of work
(`agents/reconciling/reconcile_units.py`) and stores the result.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress
from operator import is_not

from flotilla.agents.core.retry_policy import STEP, RetryPolicy
from flotilla.agents.planning.commander_operations import apply_operation
from flotilla.agents.planning.effects import (
    AskCommander,
    Effect,
    PlanFinished,
    PlanStalled,
    PlanStopped,
    UpdatePlanCard,
    card_key,
    finished_key,
    stalled_key,
    stopped_key,
)
from flotilla.agents.planning.plan import (
    AbortPlan,
    CancelPlan,
    CommanderOperation,
    Outcome,
    Plan,
    Step,
    changed,
)
from flotilla.agents.planning.plan_transitions import (
    apply_outcome,
    dispatch,
    fail_step,
    stalled,
    with_status,
)


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
        new = self.plan.steps
        # in C (compress, is_not): a long plan's unchanged steps cost next to nothing
        return [*compress(new, map(is_not, new, old)), *new[len(old) :]]


def decide(
    plan: Plan,
    now: datetime,
    *,
    outcomes: Sequence[Outcome] = (),
    operations: Sequence[CommanderOperation] = (),
    assignees: Collection[str] = (),
    disabled: Collection[str] = (),
    actor: str | None = None,
    retry: RetryPolicy = STEP,
) -> Decision:
    """Apply commander operations, then outcomes, then choose dispatches. Pure.

    `retry`: when a step's transient failure is tried again (`agents/core/retry_policy.py`).

    `actor`: the Slack user on whose behalf the operations are applied (a person who
    cancels from the card or with `/flotilla cancel`), named in the stop notice.

    Nothing new (or only stale/repeated outcomes) gives a decision with the same plan
    and no effects. A change bumps the plan's version and adds one plan-card refresh,
    and – when it left the plan stalled with no commander asked – a `PlanStalled`.
    Raises `OperationRejected`/`PlanValidationError` for an operation that is not allowed.
    """
    current = plan
    effects: list[Effect] = []
    for op in operations:
        if isinstance(op, CancelPlan) and actor is None:
            # the commander's own cancel: its words are said as its own, never as a
            # person's ("cancelled by <@U…>" is written only for a person who cancelled)
            op = CancelPlan(reason=f"by the commander: {op.reason}")
        was = current
        current = apply_operation(current, op, assignees=assignees, disabled=disabled)
        effects.extend(_stopped(was, current, op, actor))
    for outcome in outcomes:
        current, more = apply_outcome(current, outcome, now, retry)
        effects.extend(more)
    current, more = dispatch(current, now)
    effects.extend(more)
    if current is plan:
        return Decision(plan, plan)
    return _versioned(plan, current, effects)


def decide_agent_gone(plan: Plan, now: datetime, agent: str, reason: str) -> Decision:
    """Fail the pending steps assigned to `agent` (removed or disabled), each under its
    `on_failure` policy, then dispatch what is ready. Pure; no change when none is pending."""
    current = plan
    effects: list[Effect] = []
    for index in [s.index for s in plan.steps if s.assignee == agent and s.status == "pending"]:
        step = current.steps[index - 1]
        if step.status == "pending":  # an earlier failure may have aborted the plan
            current, more = fail_step(current, step, reason)
            effects.extend(more)
    if current is plan:
        return Decision(plan, plan)
    current, more = dispatch(current, now)
    effects.extend(more)
    return _versioned(plan, current, effects)


def _stopped(before: Plan, after: Plan, op: CommanderOperation, actor: str | None) -> list[Effect]:
    """The effects of an operation that ended the plan: stop its runs, say why, once."""
    if after.status == before.status:
        return []
    if isinstance(op, CancelPlan):
        stop = PlanStopped(
            key=stopped_key(after.id),
            conversation_id=after.conversation_id,
            plan_id=after.id,
            reason=op.reason,
            by=actor,
        )
        return [stop]
    if after.status == "aborted":
        finished = PlanFinished(
            key=finished_key(after.id),
            conversation_id=after.conversation_id,
            plan_id=after.id,
            status="aborted",
            reason=op.reason if isinstance(op, AbortPlan) else None,
        )
        return [finished]
    return []


def _versioned(before: Plan | None, plan: Plan, effects: list[Effect]) -> Decision:
    version = (before.version if before is not None else plan.version) + 1
    plan = changed(plan, {"version": version})
    card = UpdatePlanCard(
        key=card_key(plan.id, version),
        conversation_id=plan.conversation_id,
        plan_id=plan.id,
        version=version,
    )
    return Decision(before, plan, [*effects, card, *_stall_check(before, plan, effects)])


def _stall_check(before: Plan | None, after: Plan, effects: list[Effect]) -> list[Effect]:
    """Ask the commander when this change left the plan stalled – e.g. the last run in
    flight ended while a failed step blocks the rest – unless it is being asked already."""
    if before is None or stalled(before) or not stalled(after):
        return []
    if any(isinstance(e, AskCommander) for e in effects):
        return []  # the failure just decided asks the commander itself
    check = PlanStalled(
        key=stalled_key(after.id, after.version),
        conversation_id=after.conversation_id,
        plan_id=after.id,
        version=after.version,
    )
    return [check]


def start(plan: Plan, now: datetime) -> Decision:
    """A freshly stored plan (version 0): dispatch its first step(s). Pure."""
    current, effects = dispatch(with_status(plan), now)
    return _versioned(None, current, effects)
