"""How a plan ends in the thread, and how a failure is told: sentences people can read.

Every plan ends with an answer. A completed plan whose last step is not the commander's
gets a short final answer written by the commander from the steps' summaries – one run
under a fixed key (`final_answer_key`), so a redelivery or a crash never pays for it or
posts it twice – and, should the model fail, a plain sentence built from the summaries
instead. An aborted or cancelled plan ends with one sentence saying what happened and
which steps finished (what is kept). A step that really failed is said once, in words,
with what happens next under its `on_failure`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from flotilla.agents.core.errors import PermanentError, RunError
from flotilla.agents.planning.effects import PlanFinished, StepFailureNotice, final_answer_key
from flotilla.agents.planning.plan import COMMANDER, USER, Plan, Step
from flotilla.agents.reconciling.final_texts import store_final_text
from flotilla.agents.reconciling.run_results import StepRunResult
from flotilla.agents.running.commander import commander_step_spec
from flotilla.agents.running.runtime import RunJob, run_step
from flotilla.storage.records import ConversationRecord

if TYPE_CHECKING:
    from flotilla.agents.reconciling.ports import AnswerStream
    from flotilla.agents.running.run_context import Context

log = logging.getLogger(__name__)
SUMMARY_CHARS = 300  # of one step's summary in the fallback sentence
LISTED_STEPS = 6  # finished steps named one by one in a closing sentence; then "and N more"
FINAL_ANSWER_TASK = "Write the final answer to the request from what the team found."
NEXT = {
    "continue": "I'm skipping it and continuing",
    "abort_plan": "the plan stops here",
    "ask_commander": "I'm deciding what to do",
}


def failure_sentence(notice: StepFailureNotice) -> str:
    """ "The analyst could not finish: …; I'm skipping it and continuing" – one sentence."""
    who = "I" if notice.assignee == COMMANDER else f"The {notice.assignee}"
    why = _clause(notice.reason) or "no reason was given"
    return f"{who} could not finish “{notice.title}”: {why}; {NEXT[notice.on_failure]}."


def needs_final_answer(plan: Plan) -> bool:
    """A completed plan whose last step is not the commander's synthesis."""
    return plan.status == "completed" and bool(plan.steps) and plan.steps[-1].assignee != COMMANDER


def final_answer_input(plan: Plan) -> str:
    """The commander's task for the final answer: the request and every step's result."""
    lines = [FINAL_ANSWER_TASK]
    if plan.request.strip():
        lines.append(f"Request: {' '.join(plan.request.split())}")
    for step in plan.steps:
        lines.append(f"Step {step.index} ({_who(step)}) {step.title}: {_result_of(step)}")
        if step.output_files:
            lines.append(f"Files of step {step.index}: {', '.join(step.output_files)}")
    return "\n".join(lines)


def summary_sentence(plan: Plan) -> str:
    """The final answer when the commander's model fails: the steps' summaries, plainly."""
    done = [s for s in plan.steps if s.status == "done" and s.output_summary]
    if not done:
        return "All steps are done, but none left a summary to report."
    parts = [f"{s.title} – {_clause(s.output_summary or '', SUMMARY_CHARS)}" for s in done]
    return "All steps are done: " + "; ".join(parts) + "."


def closing_sentence(plan: Plan, reason: str | None = None, *, by: str | None = None) -> str:
    """What closes the thread of an aborted or cancelled plan: what happened, what is kept.

    `reason`: why an aborted plan was stopped (the abort's own reason); `by`: the Slack
    user who cancelled it.
    """
    if plan.status == "cancelled":
        what = f"Plan cancelled by <@{by}>" if by else "Plan cancelled"
    else:
        failed = [s for s in plan.steps if s.status == "failed"]
        why = ""
        if failed:
            why = f": step {failed[0].index} failed ({_clause(failed[0].failure_reason or '')})"
        if reason and reason.strip():
            why = f": {_clause(reason)}"
        what = f"The plan was stopped{why}"
    return f"{what}; nothing else will run, and {_kept(plan.steps)}."


async def write_final_answer(
    ctx: Context,
    conversation: ConversationRecord,
    effect: PlanFinished,
    plan: Plan,
    redelivered: bool,
) -> None:
    """Run the commander on the final answer (or continue its stored run) and post it once.

    Never silent: a model that fails gives the plain summary sentence instead. Slack's
    transient errors propagate (the job is handed over and tried again, at no model cost).
    `plan`: the finished plan as stored.
    """
    if redelivered and await ctx.port.thread_has_key(conversation, effect.key):
        return  # said already (Slack's answer was lost, or the process stopped after)
    answer = await ctx.port.open_answer(
        conversation, agent=None, result_of=None, key=effect.key, plan_id=plan.id, plan=plan
    )
    text = await _commanders_answer(ctx, conversation, plan, answer)
    try:
        finished = await answer.finish(text)
        await store_final_text(ctx.db, finished.final)  # no reconcile follows to carry it
    except PermanentError as exc:  # e.g. removed from the channel: nothing else can be said
        log.warning("the final answer could not be posted: %s", exc)


async def _commanders_answer(
    ctx: Context, conversation: ConversationRecord, plan: Plan, answer: AnswerStream
) -> str:
    """The commander's final answer (streamed to `answer` as it is written), or the plain
    summary sentence when its model fails."""
    spec = commander_step_spec()
    job = RunJob(
        run_key=final_answer_key(plan.id),
        team_id=ctx.team_id,
        input=final_answer_input(plan),
        request=conversation.request_text,
        channel_id=conversation.channel_id,
        conversation_id=conversation.id,
        plan_id=plan.id,
    )
    try:
        model = await ctx.choose_model(spec.model)
        result = await run_step(ctx.db, job, spec, model=model, show=answer.show)
    except (RunError, ValueError) as exc:  # the model failed or cannot be used
        log.warning("the commander's final answer failed; posting the summary: %s", exc)
        return summary_sentence(plan)
    except Exception:  # a bug must not leave the thread without an answer
        log.exception("the commander's final answer crashed; posting the summary")
        return summary_sentence(plan)
    if not isinstance(result, StepRunResult) or not result.message.strip():
        return summary_sentence(plan)  # it asked a question nobody is there to answer
    return result.message


def _who(step: Step) -> str:
    return "a person" if step.assignee == USER else step.assignee


def _result_of(step: Step) -> str:
    if step.status == "done":
        return " ".join((step.output_summary or "(no summary)").split())
    return f"{step.status} ({_clause(step.failure_reason or 'no reason given')})"


def _kept(steps: Sequence[Step]) -> str:
    done = [s for s in steps if s.status == "done"]
    if not done:
        return "no step had finished"
    named = [f"step {s.index} ({s.title})" for s in done[:LISTED_STEPS]]
    more = len(done) - len(named)
    if more:
        named.append(f"{more} more")
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    return f"what finished is kept: {listed}"


def _clause(text: str, limit: int = 400) -> str:
    """`text` as part of a sentence: one line, no closing full stop, bounded."""
    one = " ".join(text.split()).rstrip(".")
    return one if len(one) <= limit else one[: limit - 1].rstrip() + "…"
