"""Commander turns: a person's message, a failed step to decide on, a stalled plan.

A turn proposes (a reply, a plan, operations); this module applies what it proposes
through the reconciler and says in the thread what happened. The commander can never
leave a plan running with nothing in flight: a turn on a failure that errors, or that
leaves the plan stalled, is retried (bounded, with a backoff), and then the plan is
stopped with a sentence saying why – the person who asked is never left waiting.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING

from agents.commander import CommanderWake, commander_turn
from agents.effects import (
    AskCommander,
    MessageForCommander,
    PlanStalled,
    commander_run_key,
    stalled_key,
    to_row,
)
from agents.errors import OperationRejected, PlanValidationError, RunError
from agents.plan import AbortPlan, Plan
from agents.plan_transitions import stalled
from agents.registry import enabled_agents
from agents.runtime import RunJob
from agents.step_runs import ids, public
from storage.outbox import enqueue_effects
from storage.records import ConversationRecord

if TYPE_CHECKING:
    from agents.executor import Context

log = logging.getLogger(__name__)
Woken = AskCommander | MessageForCommander | PlanStalled
RETRY_AFTER = timedelta(seconds=10)


async def take(ctx: Context, conversation: ConversationRecord, effect: Woken) -> None:
    """One commander turn for `effect`, applied; a failure decision is never left open."""
    plan = await ctx.reconciler.plan(conversation.id)
    text, wake = _what_happened(effect, plan)
    applied = await _turn(ctx, conversation, effect, text, wake)
    if isinstance(effect, MessageForCommander):
        return  # a person's message: answered (or refused) in the thread
    plan = await ctx.reconciler.plan(conversation.id)
    if applied and (plan is None or not stalled(plan)):
        return
    if plan is None or plan.status not in ("running", "paused"):
        return
    tries = effect.turn if isinstance(effect, AskCommander) else effect.attempt
    if tries <= ctx.options.commander_retries:
        await _ask_again(ctx, conversation, plan, tries + 1)
        return
    reason = "I could not decide how to continue after a step failed"
    log.warning("commander stalled the plan; stopping it", extra=ids(conversation, effect))
    await ctx.reconciler.reconcile(
        conversation.id,
        operations=[AbortPlan(reason=reason)],
        assignees=await ctx.enabled_names(),
    )


def _what_happened(effect: Woken, plan: Plan | None) -> tuple[str, CommanderWake | None]:
    steps = plan.steps if plan is not None else ()
    if isinstance(effect, MessageForCommander):
        at_work = plan is not None and plan.status in ("running", "paused")
        wake = CommanderWake(event=f"<@{effect.user}> wrote: {effect.text}", steps=steps)
        return effect.text, wake if at_work else None
    if isinstance(effect, AskCommander):
        event = (
            f"Step {effect.step} ({effect.assignee}: {effect.title}) failed: "
            f"{effect.failure_reason}. Steps waiting for it: {effect.waiting or 'none'}."
        )
        return event, CommanderWake(event=event, steps=steps, failed_step=effect.step)
    failed = [s for s in steps if s.status == "failed"]
    which = f"step {failed[-1].index} failed ({failed[-1].failure_reason})" if failed else ""
    event = (
        f"The plan is stuck: {which or 'nothing can run'} and nothing is in flight. "
        "Decide now: retry, edit or skip the step, add steps, or abort the plan."
    )
    return event, CommanderWake(
        event=event, steps=steps, failed_step=failed[-1].index if failed else None
    )


async def _ask_again(
    ctx: Context, conversation: ConversationRecord, plan: Plan, attempt: int
) -> None:
    """Ask the commander again about a stalled plan, after a short wait."""
    retry = PlanStalled(
        key=f"{stalled_key(plan.id, plan.version)}:try:{attempt}",
        conversation_id=conversation.id,
        plan_id=plan.id,
        version=plan.version,
        attempt=attempt,
        available_at=ctx.clock() + RETRY_AFTER,
    )
    async with ctx.db.write() as conn:
        await conn.run_sync(enqueue_effects, [to_row(retry)], ctx.clock(), ignore_duplicates=True)


async def _turn(
    ctx: Context,
    conversation: ConversationRecord,
    effect: Woken,
    text: str,
    wake: CommanderWake | None,
) -> bool:
    """Run the turn and apply it; True when the plan (if any) was changed by it."""
    async with ctx.db.read() as conn:
        agents = await enabled_agents(conn, ctx.team_id)
    job = RunJob(
        run_key=commander_run_key(effect.key),
        team_id=ctx.team_id,
        input=text,
        request=conversation.request_text,
        channel_id=conversation.channel_id,
        conversation_id=conversation.id,
    )
    try:
        model = await ctx.choose_model(None)
        turn = await commander_turn(ctx.db, job, agents, model=model, wake=wake)
    except RunError as exc:
        ctx.observer.commander_turn("error")
        log.warning("commander turn failed: %s", exc, extra=ids(conversation, effect))
        if isinstance(effect, MessageForCommander):
            retry = " Please try again in a moment." if exc.retryable else ""
            await ctx.port.say(conversation, f"⚠️ {public(exc)}{retry}")
        return False
    except ValueError as exc:  # a configured model string that cannot be used
        log.error("commander model cannot be used: %s", exc, extra=ids(conversation, effect))
        if isinstance(effect, MessageForCommander):
            await ctx.port.say(conversation, "⚠️ I can't reach my model right now; an admin "
                               "has been told.")  # fmt: skip
        return False
    result = "plan" if turn.plan else "operations" if turn.operations else "reply"
    ctx.observer.commander_turn(result)
    names = [a.name for a in agents]
    if turn.reply and turn.plan is not None:
        await ctx.port.say(conversation, turn.reply)  # says what the plan is, before its card
    changed = False
    try:
        if turn.plan is not None:
            decision = await ctx.reconciler.start_plan(
                conversation.id,
                turn.plan,
                assignees=names,
                max_parallel=ctx.options.max_parallel,
                max_attempts=ctx.options.max_transient_failures,
            )
            changed = True
            log.info("plan started", extra=ids(conversation) | {"plan": decision.plan.id})
        if turn.operations:
            decision2 = await ctx.reconciler.reconcile(
                conversation.id, operations=turn.operations, assignees=names
            )
            changed = changed or bool(decision2 is not None and decision2.changed)
    except (PlanValidationError, OperationRejected) as exc:
        log.info("commander change refused: %s", exc, extra=ids(conversation, effect))
        await ctx.port.say(conversation, f"I could not change the plan: {exc}")
        return False
    if turn.reply and turn.plan is None:
        await ctx.port.say(conversation, turn.reply)  # after the change it announces is made
    return changed
