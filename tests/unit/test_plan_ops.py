"""The pure plan rules on literal plans: readiness, dispatch order, outcomes, policies."""

from __future__ import annotations

from datetime import timedelta

from flotilla.agents.planning.effects import (
    AskCommander,
    Effect,
    PostDispatch,
    ShowForm,
    StepFailureNotice,
)
from flotilla.agents.planning.plan import (
    FormField,
    FormSpec,
    Plan,
    StepAnswered,
    StepBlocked,
    StepCancelled,
    StepFailed,
    StepSucceeded,
)
from flotilla.agents.planning.plan_transitions import (
    apply_outcome,
    dispatch,
    next_dispatches,
    plan_status,
    ready_steps,
    render_input,
)
from tests.unit.reconcile_helpers import (
    T0,
    chain,
    diamond,
    fan_in,
    fan_out,
    in_progress,
    make_plan,
    statuses,
    succeed,
)


def finish(plan: Plan, index: int, summary: str = "ok") -> tuple[Plan, list[Effect]]:
    """Step `index` succeeds, then the next dispatch; the effects of both."""
    plan, first = apply_outcome(plan, succeed(plan, index, summary), T0)
    plan, then = dispatch(plan, T0)
    return plan, first + then


def test_chain_runs_one_step_after_another() -> None:
    plan, effects = dispatch(chain(3), T0)
    assert statuses(plan) == "ipp"
    assert [e.key for e in effects] == ["plan:7:step:1:attempt:1"]
    assert effects[0].kind == "post_dispatch"
    assert isinstance(effects[0], PostDispatch) and effects[0].agent == "researcher"
    plan, effects = finish(plan, 1)
    assert statuses(plan) == "dip"
    assert [e.key for e in effects] == ["plan:7:step:2:attempt:1"]
    plan, _ = finish(plan, 2)
    plan, effects = finish(plan, 3)
    assert statuses(plan) == "ddd"
    assert plan.status == "completed"
    assert [e.kind for e in effects] == ["plan_finished"]


def test_ready_steps_need_every_upstream_done_or_skipped() -> None:
    plan = diamond()
    assert [s.index for s in ready_steps(plan, T0)] == [1]
    plan, _ = dispatch(plan, T0)
    plan, _ = apply_outcome(plan, succeed(plan, 1), T0)
    assert [s.index for s in ready_steps(plan, T0)] == [2, 3]


def test_diamond_is_sequential_by_default_lowest_index_first() -> None:
    plan, _ = dispatch(diamond(), T0)
    plan, effects = finish(plan, 1)
    assert in_progress(plan) == [2]
    plan, effects = finish(plan, 2)
    assert in_progress(plan) == [3]
    plan, effects = finish(plan, 3)
    assert in_progress(plan) == [4]


def test_diamond_in_parallel_runs_both_branches() -> None:
    plan, _ = dispatch(diamond(max_parallel=2), T0)
    plan, effects = finish(plan, 1)
    assert in_progress(plan) == [2, 3]
    assert len(effects) == 2
    plan, effects = finish(plan, 3)
    assert in_progress(plan) == [2]  # 4 still waits for 2
    assert effects == []
    plan, effects = finish(plan, 2)
    assert in_progress(plan) == [4]


def test_wide_fan_out_respects_max_parallel() -> None:
    plan, _ = dispatch(fan_out(10, max_parallel=4), T0)
    plan, _ = finish(plan, 1)
    assert in_progress(plan) == [2, 3, 4, 5]
    plan, _ = finish(plan, 4)
    assert in_progress(plan) == [2, 3, 5, 6]


def test_fan_in_waits_for_every_branch() -> None:
    plan, _ = dispatch(fan_in(3, max_parallel=3), T0)
    assert in_progress(plan) == [1, 2, 3]
    plan, _ = finish(plan, 1)
    plan, _ = finish(plan, 2)
    assert in_progress(plan) == [3]
    plan, _ = finish(plan, 3)
    assert in_progress(plan) == [4]


def test_render_input_uses_summaries_files_and_request() -> None:
    plan = make_plan(
        {},
        {
            "input": "Draft from:\n{{step_1.output_summary}}\nfiles: {{step_1.output_files}} "
            "for {{ request }}"
        },
        request="launch note",
    )
    plan, _ = dispatch(plan, T0)
    outcome = StepSucceeded(index=1, attempt=1, summary="- market +20%", files=["F1", "F2"])
    plan, _ = apply_outcome(plan, outcome, T0)
    plan, effects = dispatch(plan, T0)
    assert isinstance(effects[0], PostDispatch)
    assert effects[0].text == ("Draft from:\n- market +20%\nfiles: F1\nF2 for launch note")
    assert render_input(plan.steps[1], plan) == effects[0].text


def test_same_outcome_twice_and_stale_attempts_change_nothing() -> None:
    plan, _ = dispatch(chain(2), T0)
    done = succeed(plan, 1)
    after, _ = apply_outcome(plan, done, T0)
    again, effects = apply_outcome(after, done, T0)
    assert again is after and effects == []
    stale = StepSucceeded(index=2, attempt=0, summary="x")
    assert apply_outcome(after, stale, T0)[0] is after
    late_failure = StepFailed(index=1, attempt=1, reason="boom", retryable=False)
    assert apply_outcome(after, late_failure, T0)[0] is after
    assert apply_outcome(after, StepSucceeded(index=9, attempt=1, summary=""), T0)[0] is after


def test_transient_failure_backs_off_then_retries_as_a_new_attempt() -> None:
    plan, _ = dispatch(chain(2), T0)
    plan, effects = apply_outcome(
        plan, StepFailed(index=1, attempt=1, reason="429", retryable=True), T0
    )
    step = plan.steps[0]
    assert (step.status, step.transient_failures, step.attempts) == ("pending", 1, 1)
    assert step.not_before == T0 + timedelta(seconds=30)
    assert [(e.kind, e.available_at) for e in effects] == [("retry_due", step.not_before)]
    assert next_dispatches(plan, T0) == []  # backing off: nothing to do yet
    plan, effects = dispatch(plan, T0 + timedelta(seconds=30))
    assert [e.key for e in effects] == ["plan:7:step:1:attempt:2"]
    # a transient failure's retry: the try it is, so the first dispatch message is edited
    retry = effects[0]
    assert isinstance(retry, PostDispatch) and (retry.retry, retry.max_tries) == (2, 3)


def test_transient_cap_turns_into_a_real_failure() -> None:
    plan, _ = dispatch(chain(2), T0)
    now = T0
    for attempt in (1, 2):
        fail = StepFailed(index=1, attempt=attempt, reason="timeout", retryable=True)
        plan, _ = apply_outcome(plan, fail, now)
        now += timedelta(hours=1)
        plan, _ = dispatch(plan, now)
    assert plan.steps[0].attempts == 3
    fail = StepFailed(index=1, attempt=3, reason="timeout", retryable=True)
    plan, effects = apply_outcome(plan, fail, now)
    step = plan.steps[0]
    assert step.status == "failed"
    assert step.failure_reason == "timeout (gave up after 3 attempts)"
    # people are told once, before the commander decides
    assert [e.kind for e in effects] == ["step_failure_notice", "ask_commander"]


def test_abort_plan_policy_skips_everything_pending() -> None:
    plan, _ = dispatch(diamond(), T0)
    plan = plan.model_copy(
        update={
            "steps": (plan.steps[0].model_copy(update={"on_failure": "abort_plan"}),)
            + plan.steps[1:]
        }
    )
    plan, effects = apply_outcome(
        plan, StepFailed(index=1, attempt=1, reason="no data", retryable=False), T0
    )
    assert statuses(plan) == "fsss"
    assert plan.status == "aborted"
    assert plan.steps[3].failure_reason == (
        "not run: the plan was aborted (step 1 failed: no data)"
    )
    assert [e.kind for e in effects] == ["step_failure_notice", "plan_finished"]
    notice = effects[0]
    assert isinstance(notice, StepFailureNotice) and notice.on_failure == "abort_plan"
    assert notice.key == "plan:7:step:1:attempt:1:failure" and notice.reason == "no data"
    assert dispatch(plan, T0)[1] == []


def test_continue_policy_skips_and_downstream_runs_without_it() -> None:
    plan = make_plan({"on_failure": "continue"}, {"input": "[{{step_1.output_summary}}]"})
    plan, _ = dispatch(plan, T0)
    plan, _ = apply_outcome(
        plan, StepFailed(index=1, attempt=1, reason="paywall", retryable=False), T0
    )
    assert plan.steps[0].status == "skipped"
    assert plan.steps[0].failure_reason == "paywall"
    plan, effects = dispatch(plan, T0)
    assert isinstance(effects[0], PostDispatch) and effects[0].text == "[]"


def test_ask_commander_policy_fails_and_wakes_the_commander_with_context() -> None:
    plan, _ = dispatch(diamond(), T0)
    plan, effects = apply_outcome(
        plan, StepFailed(index=1, attempt=1, reason="bad key", retryable=False), T0
    )
    assert statuses(plan) == "fppp"
    assert plan.status == "running"
    notice, wake = effects
    assert isinstance(notice, StepFailureNotice) and notice.on_failure == "ask_commander"
    assert isinstance(wake, AskCommander)
    assert wake.key == "plan:7:step:1:attempt:1:failed"
    assert wake.failure_reason == "bad key"
    assert wake.waiting == [2, 3]
    assert dispatch(plan, T0)[1] == []  # dependants wait for the commander


def test_blocked_pauses_the_plan_and_the_answer_resumes_the_same_step() -> None:
    plan, _ = dispatch(fan_out(2, max_parallel=3), T0)
    plan, _ = dispatch(apply_outcome(plan, succeed(plan, 1), T0)[0], T0)
    assert in_progress(plan) == [2, 3]
    plan, effects = apply_outcome(
        plan, StepBlocked(index=2, attempt=1, question="Which market?"), T0
    )
    assert plan.status == "paused"
    assert [e.key for e in effects] == ["plan:7:step:2:attempt:1:question:1"]
    plan, _ = apply_outcome(plan, succeed(plan, 3), T0)
    assert plan.status == "paused"
    answer = StepAnswered(index=2, values={"answer": "EU"}, answered_by="U1")
    plan, effects = apply_outcome(plan, answer, T0)
    step = plan.steps[1]
    assert (step.status, step.attempts, plan.status) == ("in_progress", 1, "running")
    assert step.question is not None and step.question.answer == {"answer": "EU"}
    assert [(e.kind, getattr(e, "answer", None)) for e in effects] == [
        ("resume_step", {"answer": "EU"})
    ]
    # repeated deliveries of the question and the answer change nothing
    again = StepBlocked(index=2, attempt=1, question="Which market?")
    assert apply_outcome(plan, again, T0)[0] is plan
    assert apply_outcome(plan, answer, T0)[0] is plan
    plan, _ = apply_outcome(plan, succeed(plan, 2), T0)
    assert plan.status == "completed"


def test_user_step_is_a_form_that_pauses_until_submitted() -> None:
    form = FormSpec(fields=[FormField(name="budget", label="Budget?")])
    plan = make_plan({"assignee": "user", "form": form.model_dump()}, {})
    plan, effects = dispatch(plan, T0)
    assert effects[0].kind == "show_form"
    assert isinstance(effects[0], ShowForm) and effects[0].form is not None
    assert effects[0].form.fields[0].name == "budget"
    assert plan.status == "paused"
    plan, effects = apply_outcome(
        plan, StepAnswered(index=1, values={"budget": "10k"}, answered_by="U1"), T0
    )
    assert plan.steps[0].status == "done"
    assert plan.steps[0].output_summary == "budget: 10k"
    plan, effects = dispatch(plan, T0)
    assert in_progress(plan) == [2]


def test_commander_step_is_an_internal_wake_up() -> None:
    plan, effects = dispatch(make_plan({"assignee": "commander", "input": "sum up"}), T0)
    assert effects[0].kind == "run_commander_step"


def test_cancelled_run_is_requeued_without_using_the_cap() -> None:
    plan, _ = dispatch(chain(1), T0)
    plan, effects = apply_outcome(plan, StepCancelled(index=1, attempt=1), T0)
    assert (plan.steps[0].status, plan.steps[0].transient_failures) == ("pending", 0)
    plan, effects = dispatch(plan, T0)
    assert [e.key for e in effects] == ["plan:7:step:1:attempt:2"]


def test_plan_status() -> None:
    plan = chain(2)
    assert plan_status(plan) == "running"
    plan, _ = dispatch(plan, T0)
    plan, _ = finish(plan, 1)
    plan, _ = apply_outcome(plan, succeed(plan, 2), T0)
    assert plan_status(plan) == "completed"


def test_an_answer_to_an_older_question_or_attempt_is_ignored() -> None:
    plan, _ = dispatch(chain(1), T0)
    plan, _ = apply_outcome(plan, StepBlocked(index=1, attempt=1, question="First?"), T0)
    first = StepAnswered(index=1, values={"answer": "a"}, answered_by="U1", attempt=1, round=1)
    plan, _ = apply_outcome(plan, first, T0)
    plan, _ = apply_outcome(plan, StepBlocked(index=1, attempt=1, question="Second?"), T0)
    assert plan.steps[0].question is not None and plan.steps[0].question.round == 2
    assert apply_outcome(plan, first, T0)[0] is plan  # the first answer, delivered again
    wrong_attempt = first.model_copy(update={"attempt": 2, "round": 2})
    assert apply_outcome(plan, wrong_attempt, T0)[0] is plan
    second = first.model_copy(update={"round": 2, "values": {"answer": "b"}})
    plan, effects = apply_outcome(plan, second, T0)
    assert [e.key for e in effects] == ["plan:7:step:1:attempt:1:answer:2"]


def test_abort_closes_an_open_form_and_skips_runs_in_flight() -> None:
    from flotilla.agents.planning.plan import Plan, Step
    from flotilla.agents.planning.plan_transitions import abort_plan

    plan = Plan(
        id=1,
        conversation_id=1,
        steps=(
            Step(index=1, title="ask", assignee="user", status="in_progress", attempts=1),
            Step(index=2, title="run", assignee="writer", status="in_progress", attempts=1),
            Step(index=3, title="later", assignee="writer", wait_for=(1, 2)),
        ),
    )
    aborted = abort_plan(plan, "step 4 failed")
    assert aborted.status == "aborted"
    # the executor cancels the writer's run: it never reports, so it must not stay in progress
    assert [s.status for s in aborted.steps] == ["skipped", "skipped", "skipped"]
    assert all("aborted" in (s.failure_reason or "") for s in aborted.steps)
