"""Commander turns: a person's message, a failed step to decide on, a stalled plan.

A turn proposes (a reply, a plan, operations); this module applies what it proposes
through the reconciler and says in the thread what happened. The commander can never
leave a plan running with nothing in flight: a turn on a failure that errors, or that
leaves the plan stalled, is retried (bounded, with a backoff), and then the plan is
stopped with a sentence saying why – the person who asked is never left waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.core.errors import (
    OperationRejected,
    PermanentError,
    PlanValidationError,
    RunError,
    StorageError,
    TransientError,
)
from flotilla.agents.core.failures import is_storage_error
from flotilla.agents.planning.addressing import Addressee, addressed_agent, without_address
from flotilla.agents.planning.commander_operations import with_shown_inputs
from flotilla.agents.planning.decisions import Decision
from flotilla.agents.planning.effects import (
    AskCommander,
    MessageForCommander,
    PlanStalled,
    commander_run_key,
    stalled_key,
    to_row,
)
from flotilla.agents.planning.plan import MAX_COMMANDER_RETRIES, TERMINAL_PLAN, AbortPlan, Plan
from flotilla.agents.planning.plan_store import plan_from_rows
from flotilla.agents.planning.plan_transitions import stalled
from flotilla.agents.planning.session_status import activity, session_status
from flotilla.agents.reconciling.reconcile_units import AttemptWrites
from flotilla.agents.reconciling.reconciler import PlanStart
from flotilla.agents.running.attempt import Attempt
from flotilla.agents.running.commander import CommanderTurn, CommanderWake, commander_turn
from flotilla.agents.running.job_settling import Settling
from flotilla.agents.running.runtime import RunJob
from flotilla.agents.running.step_runs import ClaimReads, ids
from flotilla.agents.tools.registry import spec_from_record
from flotilla.storage.outbox import enqueue_effects
from flotilla.storage.plans import load_latest_plan
from flotilla.storage.records import ConversationRecord

if TYPE_CHECKING:
    from flotilla.agents.running.run_context import Context

log = logging.getLogger(__name__)
Woken = AskCommander | MessageForCommander | PlanStalled


@dataclass(slots=True)
class TurnReads:
    """A commander turn's reads before it runs – its conversation's newest plan, its stored
    session and the thread – made in the transaction that claims its slot when that one
    may read (SQLite, `claim_slot(also=…)`), else in one read transaction of their own."""

    conversation_id: int
    session: ClaimReads
    plan: Plan | None = None
    made: bool = False  # by the claim, not taken yet

    async def read(self, conn: AsyncConnection) -> None:
        loaded = await conn.run_sync(load_latest_plan, self.conversation_id)
        self.plan = plan_from_rows(loaded.plan, loaded.steps or []) if loaded else None
        await self.session.read(conn)
        self.made = True

    async def plan_now(self, ctx: Context) -> Plan | None:
        """The plan the claim read (once), else the plan as stored now, with the rest."""
        if self.made:
            self.made = False
            return self.plan
        self.session.first = False  # only a claim knows no one ran the turn yet
        return await ctx.reconciler.plan(self.conversation_id, self.session.read)


def turn_reads(
    ctx: Context, conversation: ConversationRecord, effect: Woken, *, redelivered: bool
) -> TurnReads:
    session = ClaimReads(turn_job(ctx, conversation, effect), fresh=False, first=not redelivered)
    return TurnReads(conversation.id, session)


async def take(
    ctx: Context,
    conversation: ConversationRecord,
    effect: Woken,
    before: TurnReads,
    attempt: Attempt | None = None,
) -> None:
    """One commander turn for `effect`, applied; a failure decision is never left open.
    `before`: its reads, made as its slot was claimed or made now; `attempt`: as its job
    claimed it (how its run yields to urgent work, how it settles with the plan it starts)."""
    plan = await before.plan_now(ctx)
    reads = before.session
    if not isinstance(effect, MessageForCommander) and not wanted(plan, effect):
        return  # the plan moved on (stopped, replaced, or no longer stuck): no turn
    await ctx.port.show_status(conversation, "processing", "working")  # seen at once
    text, wake = _what_happened(effect, plan, await _addressees(ctx))
    if isinstance(effect, MessageForCommander):
        answered = await _turn(ctx, conversation, effect, text, wake, reads, attempt)
        changed = answered.decision.plan if answered.decision is not None else None
        await show_status(ctx, conversation, changed)
        return  # a person's message: answered (or refused) in the thread
    try:
        turn = await _turn(ctx, conversation, effect, text, wake, reads, attempt)
    except TransientError:
        raise  # e.g. Slack 5xx saying it: the stored turn is taken again, at no cost
    except Exception as exc:  # a bug must not leave the plan stuck: counts as a failed turn
        if is_storage_error(exc):
            raise  # the database is away: the turn is taken again once it is back
        if isinstance(exc, PermanentError):  # e.g. Slack refused the reply: no traceback
            log.warning("commander turn failed for good: %s", exc, extra=ids(conversation, effect))
        else:
            log.exception("commander turn crashed", extra=ids(conversation, effect))
        turn = Turn(errored=True)
    if turn.decision is not None:
        plan = turn.decision.plan
        asked = any(isinstance(e, PlanStalled) for e in turn.decision.effects)
    else:
        plan, asked = await ctx.reconciler.plan(conversation.id), False
    tries = effect.turn if isinstance(effect, AskCommander) else effect.attempt
    follow = after_turn(plan, effect.plan_id, tries, ctx.options.commander_retries, asked=asked)
    if follow == "ask_again":
        assert plan is not None
        await _ask_again(ctx, conversation, plan, tries + 1)
    elif follow == "stop":
        assert plan is not None
        log.warning("commander stalled the plan; stopping it", extra=ids(conversation, effect))
        await ctx.reconciler.reconcile(
            conversation.id,
            operations=[AbortPlan(reason=gave_up(plan, errored=turn.errored))],
            assignees=await ctx.enabled_names(),
        )
    await show_status(ctx, conversation, plan if follow == "done" else None)


async def show_status(
    ctx: Context, conversation: ConversationRecord, plan: Plan | None = None
) -> None:
    """After a turn: the thread's status as its plan now is (closed when none is at work);
    `plan`: as the turn just left it (else read)."""
    if plan is None:
        plan = await ctx.reconciler.plan(conversation.id)
    if plan is None or plan.status in TERMINAL_PLAN:
        await ctx.port.show_status(conversation, "closed")
        return
    now = ctx.clock()
    await ctx.port.show_status(conversation, session_status(plan, now), activity(plan, now))


def turn_job(ctx: Context, conversation: ConversationRecord, effect: Woken) -> RunJob:
    """The commander turn's run for `effect` (its `input`, what happened, is set later)."""
    return RunJob(
        run_key=commander_run_key(effect.key),
        team_id=ctx.team_id,
        input="",
        request=conversation.request_text,
        channel_id=conversation.channel_id,
        conversation_id=conversation.id,
    )


Followup = Literal["done", "ask_again", "stop"]


def wanted(plan: Plan | None, effect: AskCommander | PlanStalled) -> bool:
    """Whether a decision turn is still needed: its plan is at work and its step still
    failed (this attempt) or the plan still stalled – a turn queued before a cancel, or
    before a person had the step retried, is dropped."""
    if plan is None or plan.id != effect.plan_id or plan.status in TERMINAL_PLAN:
        return False
    if isinstance(effect, AskCommander):
        step = plan.step(effect.step)
        if step is not None and step.status == "failed" and step.attempts == effect.attempt:
            return True
    return stalled(plan)


def after_turn(
    plan: Plan | None, plan_id: int, tries: int, max_retries: int, *, asked: bool
) -> Followup:
    """What follows the `tries`-th commander turn on a failed step or a stalled plan. Pure.

    "done" when the plan moved on – stopped, replaced, or not stalled (a run in flight, a
    timer due or a person asked; should it stall later, the reconciler asks again) – or
    when the turn's own change already asked again (`asked`); else "ask_again" up to
    `max_retries` times, then "stop": the plan is aborted with a sentence.
    """
    if plan is None or plan.id != plan_id or asked or not stalled(plan):
        return "done"
    return "ask_again" if tries <= max_retries else "stop"


def gave_up(plan: Plan, *, errored: bool) -> str:
    """The sentence that stops a plan the commander could not move on (the closing note)."""
    failed = [s for s in plan.steps if s.status == "failed"]
    what = "continue the plan"
    if failed:
        last = failed[-1]
        why = (last.failure_reason or "no reason given").strip().rstrip(".")
        what = f"continue after step {last.index} failed ({why})"
    how = ": my own model kept failing" if errored else ""
    return f"I could not decide how to {what}{how}"


async def _addressees(ctx: Context) -> list[Addressee]:
    agents = await ctx.agents.enabled()
    return [Addressee(a.name, a.display_name, a.bot_user_id) for a in agents]


def _what_happened(
    effect: Woken, plan: Plan | None, agents: Sequence[Addressee] = ()
) -> tuple[str, CommanderWake | None]:
    steps = plan.steps if plan is not None else ()
    if isinstance(effect, MessageForCommander):
        at_work = plan is not None and plan.status in ("running", "paused")
        agent = addressed_agent(effect.text, agents) if at_work else None
        event = f"<@{effect.user}> wrote: {effect.text}"
        if agent is not None:  # addressed is dispatched: the request becomes the agent's step
            event = (
                f"<@{effect.user}> wrote to {agent} directly: {without_address(effect.text)}\n"
                f"Add it to the plan as a step assigned to {agent} (add_steps), with this "
                "request as its input; it waits only for steps whose results it needs."
            )
        wake = CommanderWake(event=event, steps=steps)
        return effect.text, wake if at_work else None
    if isinstance(effect, AskCommander):
        event = (
            f"Step {effect.step} ({effect.assignee}: {effect.title}) failed: "
            f"{effect.failure_reason}. Steps waiting for it: {effect.waiting or 'none'}."
        )
        event += _no_more_retries(plan, effect.step)
        return event, CommanderWake(event=event, steps=steps, failed_step=effect.step)
    failed = [s for s in steps if s.status == "failed"]
    which = f"step {failed[-1].index} failed ({failed[-1].failure_reason})" if failed else ""
    event = (
        f"The plan is stuck: {which or 'nothing can run'} and nothing is in flight. "
        "Decide now: retry, edit or skip the step, add steps, or abort the plan. If you "
        "change nothing, the plan is stopped."
    )
    if failed:
        event += _no_more_retries(plan, failed[-1].index)
    return event, CommanderWake(
        event=event, steps=steps, failed_step=failed[-1].index if failed else None
    )


def _no_more_retries(plan: Plan | None, index: int) -> str:
    """Tells the commander when a step may not be retried again (the cap is reached)."""
    step = plan.step(index) if plan is not None else None
    if step is None or step.retries < MAX_COMMANDER_RETRIES:
        return ""
    return (
        f" Step {index} was already retried {step.retries} times, the most allowed: do not "
        "retry it again; skip it, add steps that work around it, or abort the plan."
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
        available_at=ctx.clock() + ctx.options.retry.commander.delay(attempt),
    )
    async with ctx.db.write() as conn:
        await conn.run_sync(enqueue_effects, [to_row(retry)], ctx.clock(), ignore_duplicates=True)


def refused_sentence(*, starting: bool) -> str:
    """What a person reads when the commander's plan or change was refused (no details)."""
    if starting:
        return "I could not start a plan for this; please rephrase the request."
    return "I could not change the plan as asked; it carries on as it was."


@dataclass(frozen=True, slots=True)
class Turn:
    """How a turn went: the change it made (None: nothing changed) and whether it failed."""

    decision: Decision | None = None
    errored: bool = False


async def _turn_failed(
    ctx: Context, conversation: ConversationRecord, effect: Woken, exc: RunError
) -> Turn:
    """A failed turn, said to the person who wrote; a storage outage is raised instead: the
    turn is taken again once the database is back."""
    if isinstance(exc, StorageError):
        raise exc
    ctx.observer.commander_turn("error")
    log.warning("commander turn failed: %s", exc, extra=ids(conversation, effect))
    if isinstance(effect, MessageForCommander):
        retry = " Please try again in a moment." if exc.retryable else ""
        await ctx.port.say(conversation, f"⚠️ {exc.public}{retry}")
    return Turn(errored=True)


async def _start_plan(
    ctx: Context,
    conversation: ConversationRecord,
    turn: CommanderTurn,
    names: list[str],
    settles: Settling | None,
) -> Decision:
    """Start the turn's plan, reported with the turn's writes: its run's close
    (`turn.close`) and, when nothing follows the start, its job's settle – in the plan's
    transaction. A start that stores nothing (refused, or the database away) leaves the
    close to be written on its own – or kept for the retry when the database is away."""
    assert turn.plan is not None
    closing = turn.close
    settling = settles if not turn.operations else None  # operations follow: settled after
    release = await settling.to_report() if settling is not None else None
    close = closing.statements() if closing is not None else ()
    start = PlanStart(
        turn.plan,
        names,
        max_parallel=ctx.options.max_parallel,
        max_transient_failures=ctx.options.max_transient_failures,
        intro=turn.reply or "",  # what the plan is: the card opens with it
    )
    try:
        reported = await ctx.reconciler.report_start(
            conversation.id, start, AttemptWrites(close=close, release=release)
        )
    except Exception:
        if closing is not None:
            try:
                await closing.close()
            except Exception as exc:  # kept in this process for the retry if storage is away
                log.warning("commander turn not closed: %s", exc, extra=ids(conversation))
        raise
    if closing is not None:  # stored closed with the plan
        closing.committed()
    if settling is not None:
        settling.reported(reported.others_wait)
    assert reported.decision is not None  # a started plan always has a decision
    log.info("plan started", extra=ids(conversation) | {"plan": reported.decision.plan.id})
    return reported.decision


async def _turn(
    ctx: Context,
    conversation: ConversationRecord,
    effect: Woken,
    text: str,
    wake: CommanderWake | None,
    reads: ClaimReads,
    attempt: Attempt | None,
) -> Turn:
    """Run the turn and apply it (the plan's change, if any, is in the result); `reads`:
    its stored session and the thread, read with the plan."""
    agents = [spec_from_record(record) for record in await ctx.agents.enabled()]
    job = replace(reads.job, input=text)
    try:
        model = await ctx.choose_model(None)
        read = await reads.reads(ctx.db)
        turn = await commander_turn(
            ctx.db,
            job,
            agents,
            model=model,
            wake=wake,
            reads=read,
            close_later=True,  # a plan it starts is stored with its close
            yields=attempt.yields if attempt is not None else None,
        )
    except RunError as exc:
        return await _turn_failed(ctx, conversation, effect, exc)
    except ValueError as exc:  # a configured model string that cannot be used
        log.error("commander model cannot be used: %s", exc, extra=ids(conversation, effect))
        if isinstance(effect, MessageForCommander):
            await ctx.port.say(
                conversation, "⚠️ I can't reach my model right now; an admin has been told."
            )
        return Turn(errored=True)
    result = "plan" if turn.plan else "operations" if turn.operations else "reply"
    ctx.observer.commander_turn(result)
    names = [a.name for a in agents]
    changed: Decision | None = None
    if turn.plan is None and turn.close is not None:
        await turn.close.close()  # no plan to store it with
    try:
        if turn.plan is not None:
            settles = attempt.settles if attempt is not None else None
            changed = await _start_plan(ctx, conversation, turn, names, settles)
        if turn.operations:
            shown = wake.steps if wake is not None else ()  # the plan the turn was shown
            decision = await ctx.reconciler.reconcile(
                conversation.id,
                operations=with_shown_inputs(turn.operations, shown),
                assignees=names,
            )
            if decision is not None and decision.changed:
                changed = decision
    except (PlanValidationError, OperationRejected) as exc:
        # the details are for operators; a person reads one sentence, a decision turn
        # on a failure none (the stall handling decides again, then says the outcome)
        log.warning("commander change refused: %s", exc, extra=ids(conversation, effect))
        if isinstance(effect, MessageForCommander):
            await ctx.port.say(conversation, refused_sentence(starting=turn.plan is not None))
        return Turn()
    if turn.reply and turn.plan is None:
        await ctx.port.say(conversation, turn.reply)  # after the change it announces is made
    return Turn(changed)
