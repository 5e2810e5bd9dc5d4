"""Pure plan transitions: readiness, outcomes, failure policies, dispatch choice.

Every function takes a `Plan` (and `now` where time matters) and returns a new `Plan`
plus the `Effect`s it decided; nothing here performs I/O or reads a clock. A function
that changes nothing returns the very same `Plan` object, so callers detect "nothing
new" with `is`. Outcomes that do not match the step's current state and attempt (stale,
duplicated or reordered deliveries) change nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from flotilla.agents.core.retry_policy import STEP, RetryPolicy
from flotilla.agents.planning.effects import (
    AskCommander,
    AskUser,
    Effect,
    PlanFinished,
    PostDispatch,
    ResumeStep,
    RetryDue,
    RunCommanderStep,
    ShowForm,
    StepFailureNotice,
    answer_key,
    failed_key,
    failure_notice_key,
    finished_key,
    question_key,
    retry_key,
    step_key,
)
from flotilla.agents.planning.plan import (
    COMMANDER,
    SUCCESSFUL,
    USER,
    Outcome,
    Plan,
    PlanStatus,
    Question,
    Step,
    StepAnswered,
    StepBlocked,
    StepCancelled,
    StepFailed,
    StepSucceeded,
    changed,
)
from flotilla.agents.planning.plan_tally import replaced, tally
from flotilla.agents.planning.plan_validation import STEP_REF, TEMPLATE

Result = tuple[Plan, list[Effect]]
CANCELLED_NOTE = "cancelled: "  # how a cancelled plan's unfinished steps are noted
# --- reading a plan ---------------------------------------------------------------------


def ready_steps(plan: Plan, now: datetime) -> list[Step]:
    """Pending steps whose upstream steps all succeeded (done or skipped), lowest index first.

    A step backing off after a transient failure is ready once `now` reaches `not_before`.
    """
    return list(_ready(plan, now))


def _ready(plan: Plan, now: datetime) -> Iterator[Step]:
    steps = plan.steps
    for index in tally(steps).pending:  # the pending steps only, lowest index first
        s = steps[index - 1]
        if (s.not_before is None or s.not_before <= now) and all(
            steps[d - 1].status in SUCCESSFUL for d in s.wait_for
        ):
            yield s


def is_paused(plan: Plan) -> bool:
    """A blocked step or an open user form pauses the whole plan."""
    return any(_pauses(s) for s in plan.steps)


def _pauses(step: Step) -> bool:
    return step.status == "blocked" or (step.status == "in_progress" and step.assignee == USER)


def plan_status(plan: Plan) -> PlanStatus:
    """The status the steps imply: aborted/cancelled stick; all succeeded → completed."""
    return _status_of(plan.status, plan.steps)


def _status_of(status: PlanStatus, steps: tuple[Step, ...]) -> PlanStatus:
    if status in ("aborted", "cancelled"):
        return status
    counts = tally(steps)  # counted once per steps tuple (agents/planning/plan_tally.py)
    if counts.pausing:
        return "paused"
    return "running" if counts.unfinished else "completed"


def in_flight(plan: Plan) -> int:
    """Steps dispatched and not finished (in progress or blocked)."""
    return tally(plan.steps).in_flight


def next_dispatches(plan: Plan, now: datetime) -> list[Step]:
    """What to dispatch now: at most `max_parallel` in flight, lowest index first.

    `max_parallel == 1` (the default) is the sequential mode. A user step pauses the
    plan, so nothing is chosen after one.
    """
    if plan_status(plan) != "running":
        return []
    slots = plan.max_parallel - in_flight(plan)
    chosen: list[Step] = []
    if slots <= 0:
        return chosen
    for step in _ready(plan, now):  # lazily: a long plan is not scanned past the slots
        chosen.append(step)
        if len(chosen) >= slots or step.assignee == USER:
            break
    return chosen


def render_input(step: Step, plan: Plan) -> str:
    """The step's input with `{{…}}` references replaced by upstream results.

    A skipped step renders as empty, so its dependants run as if it produced nothing.
    """

    def replace(match: Any) -> str:
        name = match.group(1).strip()
        if name == "request":
            return plan.request
        ref = STEP_REF.match(name)
        source = plan.step(int(ref.group(1))) if ref else None
        if ref is None or source is None:
            return str(match.group(0))
        if ref.group(2) == "output_files":
            return "\n".join(source.output_files)
        return source.output_summary or ""

    return TEMPLATE.sub(replace, step.input)


# --- changing a plan --------------------------------------------------------------------


def replace_step(plan: Plan, step: Step) -> Plan:
    """The plan with `step` in its place, and the plan status recomputed."""
    old = plan.steps
    listed = list(old)
    was, listed[step.index - 1] = listed[step.index - 1], step
    steps = tuple(listed)
    replaced(old, steps, was, step)  # the new tuple's tally, from the old one's
    return changed(plan, {"steps": steps, "status": _status_of(plan.status, steps)})


def with_status(plan: Plan) -> Plan:
    """The plan with the status its steps imply (the same object when unchanged)."""
    status = plan_status(plan)
    return plan if status == plan.status else changed(plan, {"status": status})


def _update(step: Step, **changes: Any) -> Step:
    return changed(step, changes)


def _meta(plan: Plan, step: Step) -> dict[str, Any]:
    """The fields every effect of a step attempt carries (and its key is built from)."""
    return {
        "key": step_key(plan.id, step.index, step.attempts),
        "conversation_id": plan.conversation_id,
        "plan_id": plan.id,
        "step": step.index,
        "attempt": step.attempts,
    }


def dispatch(plan: Plan, now: datetime) -> Result:
    """Mark the chosen next steps in progress (a new attempt each) and decide their effects."""
    effects: list[Effect] = []
    for chosen in next_dispatches(plan, now):
        step = _update(chosen, status="in_progress", attempts=chosen.attempts + 1, not_before=None)
        plan = replace_step(plan, step)
        # only a transient failure's backoff sets `not_before`: this dispatch is its retry
        effects.append(_dispatch_effect(plan, step, retry=chosen.not_before is not None))
    return plan, effects


def _dispatch_effect(plan: Plan, step: Step, *, retry: bool = False) -> Effect:
    fields = _meta(plan, step) | {"title": step.title, "text": render_input(step, plan)}
    if step.assignee == USER:
        return ShowForm(**fields, form=step.form)
    if step.assignee == COMMANDER:
        return RunCommanderStep(**fields)
    if retry:
        tries = {"retry": step.transient_failures + 1, "max_tries": plan.max_transient_failures}
        return PostDispatch(**fields, agent=step.assignee, **tries)
    return PostDispatch(**fields, agent=step.assignee)


def apply_outcome(plan: Plan, outcome: Outcome, now: datetime, retry: RetryPolicy = STEP) -> Result:
    """Record what happened to a dispatched step. Stale or repeated outcomes change nothing.
    `retry`: when a transient failure is tried again (its tries are the plan's own)."""
    step = plan.step(outcome.index)
    if step is None:
        return plan, []
    if isinstance(outcome, StepAnswered):
        return _answered(plan, step, outcome)
    if outcome.attempt != step.attempts or step.status not in ("in_progress", "blocked"):
        return plan, []
    if isinstance(outcome, StepSucceeded):
        if step.status != "in_progress":
            return plan, []
        done = _update(
            step,
            status="done",
            output_summary=outcome.summary,
            output_files=tuple(outcome.files),
            failure_reason=None,
        )
        return _finish(plan, replace_step(plan, done), [])
    if isinstance(outcome, StepFailed):
        return _failed(plan, step, outcome, now, retry)
    if isinstance(outcome, StepBlocked):
        return _blocked(plan, step, outcome)
    if isinstance(outcome, StepCancelled):
        requeued = _update(step, status="pending", failure_reason=outcome.reason, question=None)
        return replace_step(plan, requeued), []
    return plan, []


def _answered(plan: Plan, step: Step, outcome: StepAnswered) -> Result:
    asked = step.question
    stale_attempt = outcome.attempt is not None and outcome.attempt != step.attempts
    stale_round = (
        outcome.round is not None
        and step.assignee != USER  # a user step's own form has no question rounds
        and (asked is None or asked.round != outcome.round)
    )
    if stale_attempt or stale_round:
        return plan, []
    if step.status == "blocked" and step.question is not None:
        question = step.question.model_copy(
            update={"answer": dict(outcome.values), "answered_by": outcome.answered_by}
        )
        resumed = _update(step, status="in_progress", question=question)
        effect = ResumeStep(
            **_meta(plan, step)
            | {"key": answer_key(plan.id, step.index, step.attempts, question.round)},
            agent=step.assignee,
            question=question.text,
            answer=dict(outcome.values),
            answered_by=outcome.answered_by,
            round=question.round,
        )
        return replace_step(plan, resumed), [effect]
    if step.status == "in_progress" and step.assignee == USER:
        summary = "\n".join(f"{name}: {value}" for name, value in outcome.values.items())
        done = _update(step, status="done", output_summary=summary, failure_reason=None)
        return _finish(plan, replace_step(plan, done), [])
    return plan, []


def _blocked(plan: Plan, step: Step, outcome: StepBlocked) -> Result:
    last = step.question
    repeated = last is not None and last.answer is not None and last.text == outcome.question
    if step.status != "in_progress" or step.assignee == USER or repeated:
        return plan, []
    rnd = last.round + 1 if last is not None else 1
    question = Question(text=outcome.question, form=outcome.form, round=rnd)
    blocked = _update(step, status="blocked", question=question)
    ask = AskUser(
        **_meta(plan, step) | {"key": question_key(plan.id, step.index, step.attempts, rnd)},
        question=outcome.question,
        form=outcome.form,
        round=rnd,
    )
    return replace_step(plan, blocked), [ask]


def _failed(
    plan: Plan, step: Step, outcome: StepFailed, now: datetime, retry: RetryPolicy
) -> Result:
    failures = step.transient_failures + 1
    policy = retry.with_attempts(plan.max_transient_failures)
    if outcome.retryable and policy.tries_left(failures):
        asked = outcome.retry_after_seconds
        wait = policy.delay(failures, timedelta(seconds=asked) if asked is not None else None)
        not_before = now + wait
        waiting = _update(
            step,
            status="pending",
            transient_failures=failures,
            not_before=not_before,
            failure_reason=outcome.reason,
            question=None,
        )
        timer = RetryDue(
            **_meta(plan, step) | {"key": retry_key(plan.id, step.index, step.attempts)},
            available_at=not_before,
        )
        return replace_step(plan, waiting), [timer]
    reason = outcome.reason
    if outcome.retryable:
        reason = f"{reason} (gave up after {failures} attempts)"
        step = _update(step, transient_failures=failures)
    return fail_step(plan, step, reason)


def fail_step(plan: Plan, step: Step, reason: str) -> Result:
    """A real failure of `step`, following its `on_failure` policy; people are told once
    (a `StepFailureNotice`, before whatever the policy decides next)."""
    notice = StepFailureNotice(
        **_meta(plan, step) | {"key": failure_notice_key(plan.id, step.index, step.attempts)},
        assignee=step.assignee,
        title=step.title,
        reason=reason,
        on_failure=step.on_failure,
    )
    if step.on_failure == "continue":
        skipped = _update(step, status="skipped", failure_reason=reason, question=None)
        return _finish(plan, replace_step(plan, skipped), [notice])
    failed = _update(step, status="failed", failure_reason=reason, question=None)
    new = replace_step(plan, failed)
    if new.status in ("aborted", "cancelled"):
        return new, []
    if step.on_failure == "abort_plan":
        aborted = abort_plan(new, f"step {step.index} failed: {reason}")
        return _finish(plan, aborted, [notice])
    ask = AskCommander(
        **_meta(plan, step) | {"key": failed_key(plan.id, step.index, step.attempts)},
        title=step.title,
        assignee=step.assignee,
        failure_reason=reason,
        transient_failures=failed.transient_failures,
        input=step.input,
        waiting=[s.index for s in new.steps if step.index in s.wait_for],
    )
    return new, [notice, ask]


def abort_plan(plan: Plan, reason: str) -> Plan:
    """Stop the plan: every step not finished becomes skipped – open forms, and steps in
    flight too (the executor cancels their runs at once, so none would ever report)."""
    note = f"not run: the plan was aborted ({reason})"
    return _stop(plan, "aborted", note, ("blocked", "in_progress"))


def cancel_plan(plan: Plan, reason: str) -> Plan:
    """Cancel the plan: every step not finished becomes skipped, in-flight ones included."""
    note = f"{CANCELLED_NOTE}{reason}"
    return _stop(plan, "cancelled", note, ("blocked", "in_progress"))


def _stop(plan: Plan, status: PlanStatus, note: str, also: Sequence[str]) -> Plan:
    steps = tuple(
        _update(s, status="skipped", failure_reason=note, not_before=None)
        if s.status == "pending" or s.status in also
        else s
        for s in plan.steps
    )
    return plan.model_copy(update={"steps": steps, "status": status})


def _finish(before: Plan, after: Plan, effects: list[Effect]) -> Result:
    """Tell the commander once when the plan has just completed or been aborted."""
    if after.status in ("completed", "aborted") and before.status != after.status:
        finished = PlanFinished(
            key=finished_key(after.id),
            conversation_id=after.conversation_id,
            plan_id=after.id,
            status=after.status,
        )
        effects = [*effects, finished]
    return after, effects


def stalled(plan: Plan) -> bool:
    """A running plan with nothing in flight, no timer due and no person asked: only a
    decision (the commander's, or a person's) can move it. Pure.

    A step backing off counts as a timer only if its upstream all succeeded: one whose
    upstream was retried and failed again would not be dispatched when its timer fires.
    """
    if plan.status != "running" or in_flight(plan):
        return False
    steps = plan.steps
    return not any(
        steps[i - 1].not_before is not None
        and all(steps[d - 1].status in SUCCESSFUL for d in steps[i - 1].wait_for)
        for i in tally(steps).pending
    )
