"""A step handed to whoever performs it: its form or dispatch message posted in the thread
(never twice, even when the outbox row is delivered again after a crash), and the work of
a long effect – a step run or a commander turn – that the executor runs as a job."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.delivering import plan_notices
from flotilla.agents.planning.effects import (
    AskCommander,
    AskUser,
    Effect,
    MessageForCommander,
    PlanFinished,
    PlanStalled,
    PostDispatch,
    ResumeStep,
    RunCommanderStep,
    ShowForm,
    final_answer_key,
)
from flotilla.agents.planning.plan import Plan
from flotilla.agents.running import commander_turns, plan_reads, step_runs
from flotilla.agents.running.attempt import Attempt, Work
from flotilla.agents.running.run_context import Context
from flotilla.agents.running.slot_requests import agent_of
from flotilla.storage.db import Also
from flotilla.storage.records import ConversationRecord, MessageRecord

if TYPE_CHECKING:
    from flotilla.agents.scheduling.admission import AdmissionLoop

log = logging.getLogger(__name__)


async def post_form(
    ctx: Context,
    conversation: ConversationRecord,
    effect: ShowForm | AskUser,
    *,
    redelivered: bool,
    handed: bool = False,
) -> None:
    """Post a form step's form (or an agent's question) unless its step moved on; `handed`:
    see `current_plan`."""
    plan = remembered_current(ctx, effect, handed) or await plan_reads.current_plan(ctx, effect)
    if plan is None:
        return  # the plan moved on (cancelled, aborted): no form to show
    if redelivered and await ctx.port.thread_has_key(conversation, effect.key):
        return
    await plan_notices.show_card(ctx, conversation, effect.plan_id, first=True)
    await ctx.port.post_form(conversation, effect, plan)
    if isinstance(effect, ShowForm):
        ctx.observer.dispatched("user")
        log.info("step dispatched to a person", extra=step_runs.ids(conversation, effect))


async def current_plan(
    ctx: Context,
    admission: AdmissionLoop,
    effect: PostDispatch | RunCommanderStep | ResumeStep,
    conversation: ConversationRecord,
    *,
    handed: bool,
) -> Plan | None:
    """The step's plan if the step is still current, else None (cancelled or aborted
    before it ran: nothing to post or run).

    `handed`: a first delivery this process's reconcile handed over as it committed
    (`OutboxSender.hand_over`). It takes the plan that reconcile remembers, when the step
    is current in it: no read. On SQLite only: there one process serves the database and
    every plan write goes through its reconciler, so a stop committed since (a cancel,
    an abort) is remembered already; on PostgreSQL another replica's cancel would not be.
    Its slot request then reads the admission facts in its claim (`SlotRequest.complete`).
    Otherwise the plan is read, with the admission facts when they are due (one read
    transaction, not two)."""
    remembered = remembered_current(ctx, effect, handed)
    if remembered is not None:
        return remembered
    team, agent = conversation.team_id, agent_of(effect)

    async def facts(conn: AsyncConnection) -> None:
        await admission.read_facts_in(conn, team, agent)

    return await plan_reads.current_plan(ctx, effect, also=facts)


def remembered_current(
    ctx: Context,
    effect: PostDispatch | RunCommanderStep | ResumeStep | ShowForm | AskUser,
    handed: bool,
) -> Plan | None:
    """The plan this process's reconcile committed as it handed `effect` over, if the
    effect's step is current in it (SQLite only, see `current_plan`); else None: read."""
    if not handed:
        return None
    remembered = plan_reads.remembered(ctx, effect.conversation_id, effect.plan_id)
    return remembered if plan_reads.is_current(remembered, effect) else None


async def post_dispatch(
    ctx: Context, conversation: ConversationRecord, effect: PostDispatch, *, redelivered: bool
) -> MessageRecord | None:
    """Post the step's dispatch message; the message to keep, stored in the transaction
    that claims the step's run (`claim_slot`: no transaction of its own), None when a
    retry's edit kept it already. After a crash between the post and that claim the
    message is in the thread but maybe not kept: found there, it is kept, never posted
    twice."""
    await plan_notices.show_card(ctx, conversation, effect.plan_id, first=True)
    if redelivered and (found := await ctx.port.dispatch_posted(conversation, effect)):
        return found
    message = await ctx.port.post_dispatch(conversation, effect)
    ctx.observer.dispatched("agent")
    log.info("step dispatched to %s", effect.agent, extra=step_runs.ids(conversation, effect))
    return message


def work_of(
    ctx: Context,
    effect: Effect,
    conversation: ConversationRecord,
    redelivered: bool,
    plan: Plan | None = None,
) -> tuple[str | None, Work, Also | None]:
    """The run's lease key (None: a commander turn's own), the work of an effect, and what
    its claim's transaction may read for it (a step's reads before its run). `plan`: a
    finished plan as just read, for its final answer (else read when its slot is granted)."""
    if isinstance(effect, PlanFinished):
        finished = effect

        async def final_answer(attempt: Attempt) -> None:  # when its slot is granted
            read = plan or await plan_reads.load(ctx, conversation.id, finished.plan_id)
            if read is not None:
                await plan_notices.final_answer(ctx, conversation, finished, read, redelivered)

        return final_answer_key(effect.plan_id), final_answer, None
    if isinstance(effect, RunCommanderStep):
        reads = step_runs.claim_reads(ctx, conversation, effect, redelivered=redelivered)

        async def commander_step(attempt: Attempt) -> None:  # when its slot is granted
            ctx.observer.dispatched("commander")
            log.info("step dispatched to the commander", extra=step_runs.ids(conversation, effect))
            await step_runs.run(ctx, conversation, effect, redelivered, reads, attempt)

        return effect.key, commander_step, reads.read
    if isinstance(effect, PostDispatch | ResumeStep):
        step = effect
        reads = step_runs.claim_reads(ctx, conversation, step, redelivered=redelivered)
        key = effect.key if isinstance(effect, PostDispatch) else step_runs.run_key_of(effect)
        return (
            key,
            lambda attempt: step_runs.run(ctx, conversation, step, redelivered, reads, attempt),
            reads.read,
        )
    if isinstance(effect, AskCommander | MessageForCommander | PlanStalled):
        turn = commander_turns.turn_reads(ctx, conversation, effect, redelivered=redelivered)
        return (
            None,
            lambda attempt: commander_turns.take(ctx, conversation, effect, turn, attempt),
            turn.read,
        )
    raise TypeError(f"no performer for {type(effect).__name__}")  # pragma: no cover
