"""Commander operations (revisions): validated, applied, never able to set done/failed."""

from __future__ import annotations

import pytest

from flotilla.agents.core.errors import OperationRejected, PlanValidationError
from flotilla.agents.planning.commander_operations import apply_operation, with_shown_inputs
from flotilla.agents.planning.decisions import decide
from flotilla.agents.planning.effects import PostDispatch
from flotilla.agents.planning.plan import (
    MAX_COMMANDER_RETRIES,
    AbortPlan,
    AddSteps,
    CancelPlan,
    CommanderOperation,
    EditStep,
    Plan,
    RetryStep,
    SkipStep,
    StepFailed,
    StepProposal,
)
from flotilla.agents.planning.plan_transitions import apply_outcome, dispatch
from flotilla.agents.planning.plan_validation import parse_plan
from tests.unit.reconcile_helpers import AGENTS, T0, chain, diamond, in_progress, statuses


def failed_first_step(plan: Plan) -> Plan:
    plan, _ = dispatch(plan, T0)
    failure = StepFailed(index=1, attempt=1, reason="bad source", retryable=False)
    return apply_outcome(plan, failure, T0)[0]


def test_retry_with_a_new_input_dispatches_a_new_attempt() -> None:
    plan = failed_first_step(chain(2))
    plan = apply_operation(plan, RetryStep(index=1, input="use the other source"))
    step = plan.steps[0]
    assert (step.status, step.failure_reason, step.input) == (
        "pending",
        None,
        "use the other source",
    )
    plan, effects = dispatch(plan, T0)
    assert [e.key for e in effects] == ["plan:7:step:1:attempt:2"]
    assert isinstance(effects[0], PostDispatch) and effects[0].text == "use the other source"


def test_retry_is_only_for_failed_or_skipped_steps() -> None:
    plan, _ = dispatch(chain(2), T0)
    with pytest.raises(OperationRejected, match="step 1 is in_progress; only a failed"):
        apply_operation(plan, RetryStep(index=1))
    with pytest.raises(OperationRejected, match="there is no step 5"):
        apply_operation(plan, RetryStep(index=5))


def test_commander_retries_of_a_step_are_capped() -> None:
    plan = failed_first_step(chain(2))
    for n in range(1, MAX_COMMANDER_RETRIES + 1):
        plan = apply_operation(plan, RetryStep(index=1))
        assert plan.steps[0].retries == n
        plan, _ = dispatch(plan, T0)
        failure = StepFailed(index=1, attempt=n + 1, reason="still bad", retryable=False)
        plan = apply_outcome(plan, failure, T0)[0]
    assert plan.steps[0].status == "failed"
    with pytest.raises(OperationRejected, match="already retried 3 times.*skip_step"):
        apply_operation(plan, RetryStep(index=1))
    # the other ways on stay open
    assert apply_operation(plan, SkipStep(index=1, reason="no data")).steps[0].status == "skipped"


def test_the_model_cannot_set_the_retry_count() -> None:
    raw = {"steps": [{"index": 1, "title": "a", "assignee": "writer", "retries": 0}]}
    with pytest.raises(PlanValidationError, match="'retries' is execution state"):
        parse_plan(raw)


def test_retry_input_is_validated() -> None:
    plan = failed_first_step(chain(2))
    with pytest.raises(OperationRejected, match="not upstream"):
        apply_operation(plan, RetryStep(index=1, input="{{step_2.output_summary}}"))


def test_skip_a_failed_step_unblocks_its_dependants() -> None:
    plan = failed_first_step(diamond())
    plan = apply_operation(plan, SkipStep(index=1, reason="not needed"))
    assert plan.steps[0].failure_reason == "skipped by the commander: not needed"
    plan, _ = dispatch(plan, T0)
    assert in_progress(plan) == [2]


def test_add_steps_continue_the_numbering_and_may_wait_for_any_step() -> None:
    plan = failed_first_step(chain(2))
    extra = StepProposal(index=3, title="route around", assignee="writer", wait_for=[])
    later = StepProposal(index=4, title="after", assignee="writer", wait_for=[2, 3])
    plan = apply_operation(plan, AddSteps(steps=[extra, later]), assignees=AGENTS)
    assert [s.index for s in plan.steps] == [1, 2, 3, 4]
    assert plan.steps[3].wait_for == (2, 3)
    plan, _ = dispatch(plan, T0)
    assert in_progress(plan) == [3]
    gap = StepProposal(index=7, title="x", assignee="writer")  # not after the plan: refused
    with pytest.raises(PlanValidationError, match="expected 5"):
        apply_operation(plan, AddSteps(steps=[gap]), assignees=AGENTS)
    ghost = StepProposal(index=5, title="x", assignee="ghost")
    with pytest.raises(PlanValidationError, match="no agent named 'ghost'"):
        apply_operation(plan, AddSteps(steps=[ghost]), assignees=AGENTS)


def test_steps_added_after_a_plan_that_grew_meanwhile_move_to_its_end() -> None:
    """Two turns shown the same 2-step plan both add a step 3: the second one's steps are
    renumbered after the first one's, their own waits and references moving with them."""
    plan = chain(2)
    first = StepProposal(index=3, title="check Initech", assignee="researcher", wait_for=[])
    plan = apply_operation(plan, AddSteps(steps=[first]), assignees=AGENTS)
    stale = [
        StepProposal(index=3, title="compare", assignee="writer"),  # default: after step 2
        StepProposal(
            index=4,
            title="sum up",
            assignee="writer",
            wait_for=[1, 3],
            input="{{step_3.output_summary}} and {{ step_1.output_summary }}, {{request}}",
        ),
    ]
    plan = apply_operation(plan, AddSteps(steps=stale), assignees=AGENTS)
    assert [(s.index, s.title) for s in plan.steps[2:]] == [
        (3, "check Initech"),
        (4, "compare"),
        (5, "sum up"),
    ]
    assert plan.steps[3].wait_for == (2,)  # the step it was shown, not the one added meanwhile
    assert plan.steps[4].wait_for == (1, 4)
    assert plan.steps[4].input == (
        "{{step_4.output_summary}} and {{step_1.output_summary}}, {{request}}"
    )


def test_an_edit_shown_an_older_input_adds_to_the_input_as_it_is_now() -> None:
    plan, _ = dispatch(chain(2), T0)
    plan = apply_operation(plan, EditStep(index=2, input="Write it up."))
    shown = plan.steps[1].input
    first = EditStep(index=2, input=f"{shown}\nalso A", shown_input=shown)
    second = EditStep(index=2, input=f"{shown}\nalso B", shown_input=shown)
    plan = apply_operation(apply_operation(plan, first), second)
    assert plan.steps[1].input == f"{shown}\nalso A\nalso B"  # neither request lost
    rewrite = EditStep(index=2, input="start over", shown_input=shown)  # not an addition
    assert apply_operation(plan, rewrite).steps[1].input == "start over"
    ops: list[CommanderOperation] = [EditStep(index=2, input="x"), SkipStep(index=1, reason="r")]
    marked = with_shown_inputs(ops, plan.steps)
    assert marked == [EditStep(index=2, input="x", shown_input=plan.steps[1].input), ops[1]]


def test_edit_only_a_pending_step() -> None:
    plan, _ = dispatch(chain(2), T0)
    plan = apply_operation(plan, EditStep(index=2, input="new {{step_1.output_summary}}"))
    assert plan.steps[1].input == "new {{step_1.output_summary}}"
    plan = apply_operation(plan, EditStep(index=2, title="Renamed"))
    assert plan.steps[1].title == "Renamed"
    with pytest.raises(OperationRejected, match="only a pending step can be edited"):
        apply_operation(plan, EditStep(index=1, input="x"))
    with pytest.raises(OperationRejected, match="needs a new input or a new title"):
        apply_operation(plan, EditStep(index=2))


def test_abort_and_cancel_both_stop_running_steps() -> None:
    plan, _ = dispatch(chain(3), T0)
    aborted = apply_operation(plan, AbortPlan(reason="wrong question"))
    assert (statuses(aborted), aborted.status) == ("sss", "aborted")  # its run is cancelled
    cancelled = apply_operation(plan, CancelPlan(reason="user said stop"))
    assert (statuses(cancelled), cancelled.status) == ("sss", "cancelled")
    with pytest.raises(OperationRejected, match="already cancelled"):
        apply_operation(cancelled, RetryStep(index=1))


def test_decide_applies_operations_then_dispatches_and_bumps_the_version_once() -> None:
    plan = failed_first_step(chain(2))
    decision = decide(plan, T0, operations=[RetryStep(index=1)])
    assert decision.plan.version == plan.version + 1
    assert [e.kind for e in decision.effects] == ["post_dispatch", "update_plan_card"]
    assert [s.index for s in decision.changed_steps()] == [1]
    nothing = decide(decision.plan, T0)
    assert nothing.plan is decision.plan and nothing.effects == [] and not nothing.changed
