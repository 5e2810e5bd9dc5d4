"""The effects that report on a plan or end it, as the executor performs them: the plan
card's refresh, a cancelled plan's stop, a finished plan's final answer or closing
sentence, a step's failure notice (each said once: a redelivery checks the thread first)."""

from __future__ import annotations

import logging

from flotilla.agents.delivering import plan_endings
from flotilla.agents.planning.effects import (
    PlanFinished,
    PlanStopped,
    StepFailureNotice,
)
from flotilla.agents.planning.plan import Plan
from flotilla.agents.running import plan_reads, step_runs
from flotilla.agents.running.jobs import JobRunner
from flotilla.agents.running.run_context import Context
from flotilla.storage.records import ConversationRecord

log = logging.getLogger(__name__)


async def show_card(
    context: Context, conversation: ConversationRecord, plan_id: int, *, first: bool
) -> None:
    """Render the plan card from the plan as stored now, with its runs' wait reasons
    (`first`: only if it is not posted yet – a step's dispatch puts it above its message)."""
    card = None
    if first:  # taken as this process started the plan, or read (and taken if it can)
        card = context.reconciler.card_taken(plan_id) or await context.port.plan_card(plan_id)
    if card is not None and card.posted is not None:
        return  # posted: the step's own card refresh (an effect of its own) renders it
    plan = await plan_reads.load(context, conversation.id, plan_id, with_waits=True)
    if plan is None:
        return
    # the card as just read: not read again before its first post
    if await context.port.show_card(conversation, plan, first=first, card=card):
        # another sender's first post won (this one was deleted): the plan as it is now on
        # that card – what this sender rendered may be newer than what the winner did
        plan = await plan_reads.load(context, conversation.id, plan_id, with_waits=True)
        if plan is not None:
            await context.port.show_card(conversation, plan, first=False)


async def stopped(
    context: Context,
    runner: JobRunner,
    conversation: ConversationRecord,
    effect: PlanStopped,
    *,
    redelivered: bool,
) -> None:
    """A cancelled plan: stop its runs here, close its forms, say so once."""
    await runner.cancel_runs(effect.plan_id, conversation_id=conversation.id)
    plan = await plan_reads.load(context, conversation.id, effect.plan_id)
    if plan is not None:
        await context.port.close_forms(conversation, plan, "The plan was cancelled.")
    if redelivered and await context.port.thread_has_key(conversation, effect.key):
        return  # said already (Slack's answer was lost, or this process stopped)
    log.info("plan finished: cancelled", extra=step_runs.ids(conversation, effect))
    who = f" by <@{effect.by}>" if effect.by else ""
    note = f"Plan cancelled{who}; nothing else will run."
    if plan is not None:
        note = plan_endings.closing_sentence(plan, by=effect.by)
    await context.port.say(conversation, note, key=effect.key)


async def finished(
    context: Context,
    runner: JobRunner,
    conversation: ConversationRecord,
    effect: PlanFinished,
    *,
    redelivered: bool,
) -> Plan | None:
    """A completed plan gets its final answer, an aborted one a sentence. The plan when
    its final answer is to be written – a commander run, which the scheduler admits like
    any run (the executor asks its slot); None when it was said here (or nothing is)."""
    log.info("plan finished: %s", effect.status, extra=step_runs.ids(conversation, effect))
    if effect.status == "aborted":
        await runner.cancel_runs(effect.plan_id, conversation_id=conversation.id)
    plan = await plan_reads.load(context, conversation.id, effect.plan_id)
    if plan is None:
        return None
    if effect.status == "aborted":
        await context.port.close_forms(conversation, plan, "The plan was stopped.")
    if plan_endings.needs_final_answer(plan):
        return plan
    if redelivered and await context.port.thread_has_key(conversation, effect.key):
        return None
    if plan.status in ("aborted", "cancelled"):
        note = plan_endings.closing_sentence(plan, effect.reason)
        await context.port.say(conversation, note, key=effect.key)
    return None


async def final_answer(
    context: Context,
    conversation: ConversationRecord,
    effect: PlanFinished,
    plan: Plan,
    redelivered: bool,
) -> None:
    """The finished plan's final answer, once its run was granted a slot."""
    await plan_endings.write_final_answer(context, conversation, effect, plan, redelivered)


async def failure(
    context: Context,
    conversation: ConversationRecord,
    effect: StepFailureNotice,
    *,
    redelivered: bool,
) -> None:
    """A step really failed: said once, in words, with what happens next."""
    if redelivered and await context.port.thread_has_key(conversation, effect.key):
        return
    sentence = plan_endings.failure_sentence(effect)
    await context.port.say(conversation, sentence, key=effect.key)
