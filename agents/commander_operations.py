"""The commander's decisions about a plan: explicit operations, validated and applied.

Retry, skip, add steps, edit a pending step, abort, cancel. None of them can mark a step
done or failed: only outcomes (what really happened) do that. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Collection

from agents.errors import OperationRejected, PlanValidationError
from agents.plan import (
    MAX_COMMANDER_RETRIES,
    MAX_TITLE,
    TERMINAL_PLAN,
    AbortPlan,
    AddSteps,
    CancelPlan,
    CommanderOperation,
    EditStep,
    Plan,
    RetryStep,
    SkipStep,
    Step,
    new_steps,
)
from agents.plan_transitions import abort_plan, cancel_plan, replace_step, with_status
from agents.plan_validation import input_problems, problems_of


def apply_operation(
    plan: Plan,
    op: CommanderOperation,
    *,
    assignees: Collection[str] = (),
    disabled: Collection[str] = (),
) -> Plan:
    """Apply one commander operation, or raise `OperationRejected`/`PlanValidationError`.

    `assignees`/`disabled` are the enabled/disabled sub-agents, for `AddSteps`.
    """
    if plan.status in TERMINAL_PLAN:
        raise OperationRejected(
            f"the plan is already {plan.status}; nothing can change it now (write a new plan)"
        )
    if isinstance(op, AbortPlan):
        return abort_plan(plan, op.reason)
    if isinstance(op, CancelPlan):
        return cancel_plan(plan, op.reason)
    if isinstance(op, AddSteps):
        problems = problems_of(op.steps, assignees, disabled, existing=plan.steps)
        if problems:
            raise PlanValidationError(problems)
        added = plan.model_copy(update={"steps": plan.steps + new_steps(op.steps)})
        return with_status(added)
    step = _step(plan, op.index)
    if isinstance(op, RetryStep):
        return _retry(plan, step, op)
    if isinstance(op, SkipStep):
        return _skip(plan, step, op)
    return _edit(plan, step, op)


def _step(plan: Plan, index: int) -> Step:
    step = plan.step(index)
    if step is None:
        raise OperationRejected(
            f"there is no step {index}; the plan has steps 1..{len(plan.steps)}"
        )
    return step


def _retry(plan: Plan, step: Step, op: RetryStep) -> Plan:
    if step.status not in ("failed", "skipped"):
        raise OperationRejected(
            f"step {step.index} is {step.status}; only a failed or skipped step can be retried"
        )
    if step.retries >= MAX_COMMANDER_RETRIES:
        raise OperationRejected(
            f"step {step.index} was already retried {step.retries} times, the most allowed; "
            "do not retry it again: skip it (skip_step), add steps that work around it "
            "(add_steps), or stop the plan (abort_plan)"
        )
    changes: dict[str, object] = {
        "status": "pending",
        "retries": step.retries + 1,
        "failure_reason": None,
        "transient_failures": 0,
        "not_before": None,
        "question": None,
    }
    if op.input is not None:
        _check_input(plan, step, op.input)
        changes["input"] = op.input
    return replace_step(plan, step.model_copy(update=changes))


def _skip(plan: Plan, step: Step, op: SkipStep) -> Plan:
    if step.status not in ("pending", "failed", "blocked"):
        raise OperationRejected(
            f"step {step.index} is {step.status}; only a pending, blocked or failed step "
            "can be skipped"
        )
    skipped = step.model_copy(
        update={
            "status": "skipped",
            "failure_reason": f"skipped by the commander: {op.reason}",
            "not_before": None,
        }
    )
    return replace_step(plan, skipped)


def _edit(plan: Plan, step: Step, op: EditStep) -> Plan:
    if step.status != "pending":
        raise OperationRejected(
            f"step {step.index} is {step.status}; only a pending step can be edited "
            "(retry a failed step with a new input instead)"
        )
    if op.input is None and op.title is None:
        raise OperationRejected("edit_step needs a new input or a new title")
    changes: dict[str, object] = {}
    if op.input is not None:
        _check_input(plan, step, op.input)
        changes["input"] = op.input
    if op.title is not None:
        if not op.title.strip() or len(op.title) > MAX_TITLE:
            raise OperationRejected(f"a title must be 1..{MAX_TITLE} characters")
        changes["title"] = op.title
    return replace_step(plan, step.model_copy(update=changes))


def _check_input(plan: Plan, step: Step, template: str) -> None:
    problems = input_problems(template, upstream_of(plan, step.index))
    if problems:
        raise OperationRejected(f"step {step.index}: " + "; ".join(problems))


def upstream_of(plan: Plan, index: int) -> frozenset[int]:
    """Every step `index` waits for, directly or transitively."""
    seen: set[int] = set()
    todo = list(plan.steps[index - 1].wait_for)
    while todo:
        i = todo.pop()
        if i not in seen:
            seen.add(i)
            todo.extend(plan.steps[i - 1].wait_for)
    return frozenset(seen)
