"""A step run or a commander turn asks the scheduler for a slot: who, for whom, how urgent.

The request carries its tenant (workspace and channel), its agent and the tools it may
call (for quotas), its priority (an admin's mark, a person waiting, a long plan) and an
estimate of its tokens (the agent's recent runs) for the budgets.

The job asks in the transaction that claims its work (`claim_slot`): when nobody waits
and the caps have room (no tool quota or budget to weigh), one statement grants the slot
there and then – the idle scheduler costs no transaction of its own. Otherwise the request
waits in line and an admission pass decides. A granted request is the run's lease. The
workspace's settings and the agent's estimate, when not kept from the last poll interval,
are read first in that same transaction (`SlotRequest.complete`): no read of their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.core import telemetry
from flotilla.agents.planning.effects import (
    AskCommander,
    MessageForCommander,
    PlanFinished,
    PlanStalled,
    PostDispatch,
    ResumeStep,
    RunCommanderStep,
    final_answer_key,
    step_key,
    to_row,
)
from flotilla.agents.planning.plan import COMMANDER, USER, Plan, StepFailed
from flotilla.agents.running import step_runs
from flotilla.agents.scheduling.admission import PARK, SlotFacts
from flotilla.agents.scheduling.admission_policy import (
    FastPath,
    fast_path,
    marks_of,
    priority_of,
)
from flotilla.storage.conversations import store_message
from flotilla.storage.db import Also, Database
from flotilla.storage.outbox import finish_effect, hold_effect
from flotilla.storage.records import ConversationRecord, MessageRecord, RunRequestRecord
from flotilla.storage.run_request_leases import finish_request, grant_at_once
from flotilla.storage.run_requests import enqueue_request, lock_admission

if TYPE_CHECKING:
    from flotilla.agents.running.run_context import Context
    from flotilla.agents.scheduling.admission import AdmissionLoop

# granted_here: a pass of this process granted it a moment ago and starts it
Claim = Literal["mine", "waiting", "elsewhere", "granted_here"]

# every effect whose work asks a model: each run is admitted, counted and capped – a plan's
# final answer too (`PlanFinished`, when the plan needs one: `plan_notices.finished`)
SCHEDULED = (
    PostDispatch,
    RunCommanderStep,
    ResumeStep,
    AskCommander,
    MessageForCommander,
    PlanStalled,
    PlanFinished,
)
Scheduled = (
    PostDispatch
    | RunCommanderStep
    | ResumeStep
    | AskCommander
    | MessageForCommander
    | PlanStalled
    | PlanFinished
)


def lease_key_of(effect: Scheduled) -> str:
    """The run's lease key – the request's key (as `JobRunner.hold` leases it)."""
    if isinstance(effect, PostDispatch | RunCommanderStep):
        return effect.key
    if isinstance(effect, ResumeStep):
        return step_key(effect.plan_id, effect.step, effect.attempt)
    if isinstance(effect, PlanFinished):
        return final_answer_key(effect.plan_id)
    return f"turn:{effect.key}"


@dataclass(frozen=True, slots=True)
class SlotRequest:
    """A run's request for a slot: its columns, and whether it may be granted at once.

    `complete`: set when the admission facts were not known as it was asked for – the
    request is completed from them in the claim's transaction (`claim_slot` reads them
    first there, before anything is locked: no read transaction of their own); until
    then `values` lacks priority, estimate and tools."""

    run_key: str
    values: dict[str, Any]
    fast: FastPath | None  # None: a tool quota or a budget applies – the queue decides
    keep: MessageRecord | None = None  # the step's dispatch message, kept by the claim
    complete: Complete | None = None


Complete = Callable[[AsyncConnection], Awaitable[SlotRequest]]


def in_line(slot: SlotRequest) -> SlotRequest:
    """The request, never granted at once (a stopping process's: a running one grants it)."""
    complete = slot.complete
    if complete is None:
        return replace(slot, fast=None)

    async def completed(conn: AsyncConnection) -> SlotRequest:
        return in_line(await complete(conn))

    return replace(slot, fast=None, complete=completed)


def agent_of(effect: Scheduled) -> str:
    """Whose run the effect asks a slot for (its admission facts are that agent's)."""
    return effect.agent if isinstance(effect, PostDispatch | ResumeStep) else COMMANDER


async def slot_request(
    ctx: Context,
    admission: AdmissionLoop,
    effect: Scheduled,
    conversation: ConversationRecord,
    plan: Plan | None = None,
) -> SlotRequest:
    """What the effect's run asks the scheduler for (settings, quotas and the estimate
    as the admission loop remembers them for a poll interval: usually no read at all;
    else read by its claim, `SlotRequest.complete`); `plan`: the step's plan, if the
    caller has it."""
    team, agent = conversation.team_id, agent_of(effect)
    plan_id = getattr(effect, "plan_id", None)
    tools = await admission.tools_of(team, agent)
    plan_steps = 0
    if plan_id is not None:
        plan = (
            plan
            or ctx.reconciler.remembered(conversation.id)
            or await ctx.reconciler.plan(conversation.id)
        )
        plan_steps = len(plan.steps) if plan is not None and plan.id == plan_id else 0
    row = to_row(effect)
    values = dict(
        effect_key=effect.key,
        effect_kind=effect.kind,
        effect=row["payload"],
        conversation_id=conversation.id,
        team_id=team,
        channel_id=conversation.channel_id,
        agent_name=agent,
        plan_id=plan_id,
        step_index=getattr(effect, "step", None),
        attempt=getattr(effect, "attempt", None),
    )

    def of(facts: SlotFacts) -> SlotRequest:
        priority = priority_of(
            effect.kind,
            channel_id=conversation.channel_id,
            plan_id=plan_id,
            plan_steps=plan_steps,
            marks=marks_of(facts.settings),
            batch_steps=ctx.options.scheduler.batch_steps,
        )
        estimate = facts.estimate or ctx.options.scheduler.default_estimate
        asked = values | dict(priority=priority, estimate_tokens=estimate, tools=list(tools))
        return SlotRequest(lease_key_of(effect), asked, fast_path(facts.options, agent, tools))

    if (known := admission.facts_kept(team, agent, tools)) is not None:
        return of(known)

    # the plan's other agents' facts come with these: its next steps' claims read none
    others = {s.assignee for s in plan.steps} - {agent, USER} if plan is not None else set()

    async def complete(conn: AsyncConnection) -> SlotRequest:
        return of(await admission.facts_in(conn, team, agent, tools, also_for=others))

    return SlotRequest(lease_key_of(effect), values, None, complete=complete)


async def claim_slot(
    db: Database,
    slot: SlotRequest,
    owner: str,
    *,
    now: datetime,
    until: datetime,
    also: Also | None = None,
    hold_row: bool = True,
) -> Claim:
    """Ask for the run's slot in one write transaction and hold the outbox row meanwhile:
    "mine" (granted at once: the run starts now), "waiting" (in line: an admission pass
    grants it, the row parked until then) or "elsewhere" (another process runs it).

    `also`: the run's reads, made in this transaction once granted – on SQLite only (on
    PostgreSQL the transaction holds the admission lock every process's claims and passes
    wait for: the run reads in a transaction of its own, after).

    `slot.keep`, the step's dispatch message just posted (or found in the thread again
    after a crash), is kept whatever the claim's answer, before the run's reads see the
    thread: in this transaction on SQLite (no transaction of its own), in one just before
    on PostgreSQL (not under the admission lock). A claim delivered again keeps it once
    (one row per channel and ts). `hold_row` False: the outbox row is claimed by this
    process until `until` already (a delivery just begun, `Runner._claim`): a grant leaves
    it as it is."""
    row_key = slot.values["effect_key"]
    conversation_id = slot.values["conversation_id"]
    keep = slot.keep
    if keep is not None and not db.writes_one_at_a_time:
        async with db.write() as conn:
            await store_message(conn, conversation_id, keep, now)
        keep = None
    async with db.write() as conn:
        if slot.complete is not None:  # the admission facts: read first, before any lock
            slot = await slot.complete(conn)
        if keep is not None:
            await store_message(conn, conversation_id, keep, now)
        if slot.fast is not None:
            await lock_admission(conn)  # counted under the passes' lock (PostgreSQL)
            fast = slot.fast
            granted = await grant_at_once(
                conn,
                run_key=slot.run_key,
                owner=owner,
                now=now,
                until=until,
                capacity=fast.capacity,
                process_capacity=fast.process_capacity,
                agent_cap=fast.agent_cap,
                **slot.values,
            )
            if granted:
                if hold_row:
                    await hold_effect(conn, row_key, until)
                if also is not None and db.writes_one_at_a_time:
                    await also(conn)
                telemetry.admitted(timedelta(0))  # no time in the queue
                return "mine"
        state = await enqueue_request(
            conn, run_key=slot.run_key, now=now, owner=owner, **slot.values
        )
        if state in ("granted", "granted_here"):
            return "granted_here" if state == "granted_here" else "elsewhere"
        await hold_effect(conn, row_key, now + PARK)
        return "waiting"


async def let_go_unrun(ctx: Context, record: RunRequestRecord, owner: str) -> None:
    """A granted run not wanted any more: its request ends, its lease and row are freed."""
    now = ctx.clock()
    async with ctx.db.write() as conn:  # request (the run's lease), row: as every job
        await finish_request(conn, record.run_key, now)
        await finish_effect(conn, record.effect_key, now)


async def fail_refused(ctx: Context, record: RunRequestRecord, reason: str) -> None:
    """The budget policy refused a step's run: the step fails with the reason."""
    if record.step_index is None or record.attempt is None or record.conversation_id is None:
        return
    failed = StepFailed(
        index=record.step_index,
        attempt=record.attempt,
        reason=f"it would exceed the {reason}",
        retryable=False,
    )
    await step_runs.report(ctx, record.conversation_id, failed)
