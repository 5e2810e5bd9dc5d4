"""The effects that close a plan or report a failure, as the executor performs them: a
cancelled plan's runs stopped and its forms closed, a finished plan's final answer (a job:
the commander's run) or closing sentence, a failed step's notice – each said once."""

from __future__ import annotations

import logging

from agents import plan_endings, step_runs
from agents.effects import PlanFinished, PlanStopped, StepFailureNotice, final_answer_key
from agents.jobs import JobRunner
from agents.run_context import Context
from storage.records import ConversationRecord

log = logging.getLogger(__name__)


async def stopped(
    runner: JobRunner, conversation: ConversationRecord, effect: PlanStopped, redelivered: bool
) -> None:
    """A cancelled plan: stop its runs here, close its forms, say so once."""
    await runner.cancel_runs(effect.plan_id, conversation_id=conversation.id)
    plan = await step_runs.load(runner.context, conversation.id, effect.plan_id)
    if plan is not None:
        await runner.context.port.close_forms(conversation, plan, "The plan was cancelled.")
    if redelivered and await runner.context.port.thread_has_key(conversation, effect.key):
        return  # said already (Slack's answer was lost, or this process stopped)
    log.info("plan finished: cancelled", extra=step_runs.ids(conversation, effect))
    who = f" by <@{effect.by}>" if effect.by else ""
    note = f"Plan cancelled{who}; nothing else will run."
    if plan is not None:
        note = plan_endings.closing_sentence(plan, by=effect.by)
    await runner.context.port.say(conversation, note, key=effect.key)


async def finished(
    runner: JobRunner, conversation: ConversationRecord, effect: PlanFinished, redelivered: bool
) -> bool:
    """A completed plan gets its final answer (a job: the commander's run), an aborted
    one a sentence; True when a job now holds the row."""
    log.info("plan finished: %s", effect.status, extra=step_runs.ids(conversation, effect))
    if effect.status == "aborted":
        await runner.cancel_runs(effect.plan_id, conversation_id=conversation.id)
    plan = await step_runs.load(runner.context, conversation.id, effect.plan_id)
    if plan is None:
        return False
    if effect.status == "aborted":
        await runner.context.port.close_forms(conversation, plan, "The plan was stopped.")
    if plan_endings.needs_final_answer(plan):
        ctx, write = runner.context, plan_endings.write_final_answer
        runner.hold(
            effect,
            final_answer_key(plan.id),
            lambda: write(ctx, conversation, effect, plan, redelivered),
        )
        return True
    if redelivered and await runner.context.port.thread_has_key(conversation, effect.key):
        return False
    if plan.status in ("aborted", "cancelled"):
        note = plan_endings.closing_sentence(plan, effect.reason)
        await runner.context.port.say(conversation, note, key=effect.key)
    return False


async def failure(
    ctx: Context, conversation: ConversationRecord, effect: StepFailureNotice, redelivered: bool
) -> None:
    """A step really failed: said once, in words, with what happens next."""
    if redelivered and await ctx.port.thread_has_key(conversation, effect.key):
        return
    sentence = plan_endings.failure_sentence(effect)
    await ctx.port.say(conversation, sentence, key=effect.key)
