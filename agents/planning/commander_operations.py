"""The commander's decisions about a plan: explicit operations, validated and applied.

Retry, skip, add steps, edit a pending step, abort, cancel. None of them can mark a step
done or failed: only outcomes (what really happened) do that. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Protocol

from flotilla.agents.core.errors import OperationRejected, PlanValidationError
from flotilla.agents.planning.plan import (
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
    StepProposal,
    dependencies,
    new_steps,
)
from flotilla.agents.planning.plan_transitions import (
    abort_plan,
    cancel_plan,
    replace_step,
    with_status,
)
from flotilla.agents.planning.plan_validation import STEP_REF, TEMPLATE, input_problems, problems_of


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
        proposed = numbered_after(op.steps, len(plan.steps))
        problems = problems_of(proposed, assignees, disabled, existing=plan.steps)
        if problems:
            raise PlanValidationError(problems)
        added = plan.model_copy(update={"steps": plan.steps + new_steps(proposed)})
        return with_status(added)
    step = _step(plan, op.index)
    if isinstance(op, RetryStep):
        return _retry(plan, step, op)
    if isinstance(op, SkipStep):
        return _skip(plan, step, op)
    return _edit(plan, step, op)


def numbered_after(steps: Sequence[StepProposal], existing: int) -> list[StepProposal]:
    """New steps numbered to follow the plan's `existing` steps.

    A commander turn numbers the steps it adds after the plan it was shown; when another
    change added steps meanwhile (two people addressed agents at the same instant), its
    steps are moved to the end: their indexes, the waits among them and the template
    references to them shift together, while references to the steps it was shown stay.
    A default wait (the previous step) is kept as that step, never the step that now happens
    to precede. Steps that are not one run of indexes from at most `existing` + 1 are left
    as written (validation explains what is wrong).
    """
    if not steps:
        return list(steps)
    first = steps[0].index
    runs_on = all(s.index == first + i for i, s in enumerate(steps))
    shift = existing + 1 - first
    if not runs_on or shift <= 0 or first < 1:
        return list(steps)

    def moved(index: int) -> int:
        return index + shift if index >= first else index

    def retarget(match: re.Match[str]) -> str:
        ref = STEP_REF.match(match.group(1).strip())
        if ref is None:
            return match.group(0)
        return "{{" + f"step_{moved(int(ref.group(1)))}.{ref.group(2)}" + "}}"

    return [
        s.model_copy(
            update={
                "index": moved(s.index),
                "wait_for": [moved(d) for d in dependencies(s)],
                "input": TEMPLATE.sub(retarget, s.input),
            }
        )
        for s in steps
    ]


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
        new_input = rebased_input(op.input, shown=op.shown_input, now=step.input)
        _check_input(plan, step, new_input)
        changes["input"] = new_input
    if op.title is not None:
        if not op.title.strip() or len(op.title) > MAX_TITLE:
            raise OperationRejected(f"a title must be 1..{MAX_TITLE} characters")
        changes["title"] = op.title
    return replace_step(plan, step.model_copy(update=changes))


def rebased_input(edited: str, *, shown: str | None, now: str) -> str:
    """The input an edit gives a step whose input may have changed since the commander was
    shown it (`shown`; `now` is the stored one). Two people asking for more at the same
    instant wake two turns shown the same input; each adds its request to it. The second
    must not undo the first: what an edit added to the input it was shown is added to the
    input as it is now. An edit that rewrote the input (not an addition) replaces it."""
    if shown is None or shown == now or not edited.startswith(shown):
        return edited
    return now + edited[len(shown) :]


class ShownStep(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def input(self) -> str: ...


def with_shown_inputs(
    operations: Sequence[CommanderOperation], shown: Sequence[ShownStep]
) -> list[CommanderOperation]:
    """The operations with each edit's `shown_input` – the step's input in the plan the
    commander was shown – so that `rebased_input` can tell what the edit added."""
    inputs = {s.index: s.input for s in shown}
    return [
        op.model_copy(update={"shown_input": inputs[op.index]})
        if isinstance(op, EditStep) and op.input is not None and op.index in inputs
        else op
        for op in operations
    ]


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
