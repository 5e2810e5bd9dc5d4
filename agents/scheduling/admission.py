"""The admission loop: grants run slots in the database, in fair order, across processes.

A step run or a commander turn asks for a slot with a run request row as its job claims
its work (`agents/running/slot_requests.py`): granted there at once when nobody waits and the caps
have room, otherwise it waits in line and its outbox row is parked. An admission pass –
one at a time across the deployment (`lock_admission`) – reads the queue, lets the pure
core (`agents/scheduling/scheduler.py`) decide, and in the same transaction grants slots to this
process (a granted request is the run's lease; the outbox row is held until the lease
ends, so the job's heartbeat renews both together), and writes why the others wait (urgent work
waiting for a slot is given one by the first batch run to reach a model-turn boundary:
`agents/running/preemption.py`). After commit the granted runs start here; plans
whose waiting reasons changed get their card updated (and only those). Passes run on a
wake-up (a run put in line, a slot freed while others wait) and every `poll_seconds`
(other processes' work, expired leases).

Caps hold across processes: the deployment's granted rows with live leases are counted,
and this process's own. A killed process's granted rows wait again once its lease expired
(they keep their place in line), and are granted anew – the run resumes from its stored
history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.core import telemetry
from flotilla.agents.core.clock import Clock, woken
from flotilla.agents.core.failures import is_storage_error, storage_error
from flotilla.agents.scheduling.admission_policy import (
    SchedulerOptions,
    budgets_now,
    limits_of,
    quota_keys,
    tenant_of,
    weights_by_tenant,
    with_overrides,
)
from flotilla.agents.scheduling.roster import Roster
from flotilla.agents.scheduling.scheduler import (
    Admission,
    Limits,
    Running,
    RunRequest,
    admit,
    with_room,
)
from flotilla.agents.scheduling.wait_marks import WaitMarks
from flotilla.storage.agents import get_agent
from flotilla.storage.db import Database
from flotilla.storage.outbox import finish_effect, hold_effect
from flotilla.storage.records import RunRequestRecord
from flotilla.storage.run_requests import (
    drop_request,
    enqueue_request,
    expire_grants,
    grant_request,
    lock_admission,
    prune_requests,
    queued_requests,
    served_since,
    set_wait_reasons,
)
from flotilla.storage.runs import typical_run_tokens_of
from flotilla.storage.workspaces import workspace_settings, workspace_settings_and

log = logging.getLogger(__name__)
PARK = timedelta(hours=1)  # a waiting run's outbox row looks again this late at the latest
STEP_KINDS = ("post_dispatch", "run_commander_step", "resume_step")

Start = Callable[[RunRequestRecord], Awaitable[None]]
ShowWaits = Callable[[int, int], Awaitable[None]]  # conversation id, plan id
Refuse = Callable[[RunRequestRecord, str], Awaitable[None]]
Decide = Callable[
    [Sequence[RunRequest], Sequence[Running], Limits, datetime, Mapping[str, float] | None],
    Admission,
]


@dataclass(frozen=True, slots=True)
class SlotFacts:
    """What a run's request needs to know of its workspace and agent (remembered a while)."""

    options: SchedulerOptions  # with the workspace's admin overrides
    settings: Mapping[str, Any]  # the workspace's (priority marks)
    tools: tuple[str, ...]  # the agent's quota keys
    estimate: int  # tokens of the agent's recent runs (0: no history)


@dataclass(frozen=True, slots=True)
class _Kept:
    """The facts of a workspace and agent kept for a poll interval (not the agent's record:
    the roster keeps that)."""

    options: SchedulerOptions
    settings: Mapping[str, Any]
    estimate: int


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one admission pass did."""

    granted: tuple[RunRequestRecord, ...] = ()
    changed_plans: frozenset[tuple[int, int]] = frozenset()  # (conversation, plan)
    refused: tuple[tuple[RunRequestRecord, str], ...] = ()
    waiting_plans: frozenset[int] = frozenset()  # plans with a run still waiting after it


class AdmissionLoop:
    """This process's admission passes and the grants it starts."""

    def __init__(
        self,
        db: Database,
        *,
        owner: str,
        team_id: Callable[[], str],
        clock: Clock,
        options: SchedulerOptions,
        lease: timedelta,
        start: Start,
        show_waits: ShowWaits,
        refuse: Refuse,
        decide: Decide = admit,
        roster: Roster | None = None,
        waits: WaitMarks | None = None,
    ) -> None:
        self.db, self.owner, self.team_id, self.clock = db, owner, team_id, clock
        self.waits = waits if waits is not None else WaitMarks()  # the card's (see its module)
        # the agents as the process knows them (the executor's: one cache of the table)
        self.roster = roster if roster is not None else Roster(db, team_id)
        self.options, self.lease = options, lease
        self.start_run, self.show_waits, self.refuse = start, show_waits, refuse
        self.decide = decide  # the pure core (a benchmark passes plain FIFO to compare)
        self._wake = asyncio.Event()
        self._passing = asyncio.Lock()  # one pass at a time in this process
        self._loop: asyncio.Task[None] | None = None
        self._pruned_at: datetime | None = None
        self.passes = 0  # passes this process ran (whole or cut short: no one waited)
        # (team, agent) -> until when, the settings with overrides, the settings, the estimate
        self._facts: dict[tuple[str, str], tuple[datetime, _Kept]] = {}

    async def options_now(self, conn: AsyncConnection) -> SchedulerOptions:
        """The settings with this workspace's admin overrides applied."""
        return with_overrides(self.options, await workspace_settings(conn, self.team_id()))

    def facts_kept(self, team_id: str, agent: str, tools: tuple[str, ...]) -> SlotFacts | None:
        """The facts if they are known for this poll interval (no read); `tools`: the
        agent's quota keys (`tools_of`)."""
        if (kept := self._kept(team_id, agent)) is None:
            return None
        return SlotFacts(kept.options, kept.settings, tools, kept.estimate)

    async def facts_in(
        self,
        conn: AsyncConnection,
        team_id: str,
        agent: str,
        tools: tuple[str, ...],
        *,
        also_for: Collection[str] = (),
    ) -> SlotFacts:
        """The facts, read in the caller's transaction if they are not known (a run's
        claim, `claim_slot`: no read transaction of their own); `also_for`: agents whose
        facts are read by the same statement when they are not known either."""
        kept = self._kept(team_id, agent)
        if kept is None:
            more = [a for a in sorted(also_for) if self._kept(team_id, a) is None]
            kept = await self._read_facts(conn, team_id, agent, *more)
        return SlotFacts(kept.options, kept.settings, tools, kept.estimate)

    async def read_facts_in(self, conn: AsyncConnection, team_id: str, agent: str) -> None:
        """Read the settings and the estimate a slot request will want, in the caller's read
        (e.g. a dispatch's "still current" read), if they are not known for this poll
        interval: `facts_kept` then has them. What is read is the same, only earlier."""
        if self._kept(team_id, agent) is None:
            await self._read_facts(conn, team_id, agent)

    def _kept(self, team_id: str, agent: str) -> _Kept | None:
        cached = self._facts.get((team_id, agent))
        return cached[1] if cached is not None and cached[0] > self.clock() else None

    async def _read_facts(self, conn: AsyncConnection, team_id: str, *agents: str) -> _Kept:
        """The workspace's settings and each agent's estimate, one statement; the first
        agent's facts returned, every agent's kept for a poll interval."""
        estimates = [typical_run_tokens_of(agent) for agent in agents]
        settings, *means = await workspace_settings_and(conn, team_id, *estimates)
        if len(self._facts) > 1_000:
            self._facts.clear()
        until = self.clock() + timedelta(seconds=self.options.poll_seconds)
        options = with_overrides(self.options, settings)
        for agent, mean in zip(agents, means, strict=True):
            self._facts[(team_id, agent)] = (until, _Kept(options, settings, int(mean or 0)))
        return self._facts[(team_id, agents[0])][1]

    async def tools_of(self, team_id: str, agent: str) -> tuple[str, ...]:
        """The agent's quota keys (from the roster: usually no read)."""
        if team_id == self.roster.team_id():
            record = await self.roster.agent(agent)
        else:  # another workspace than the process's (not served by one process today)
            async with self.db.read() as conn:
                record = await get_agent(conn, team_id, agent)
        return quota_keys(record.tools, record.mcp_servers) if record is not None else ()

    def changed(self) -> None:
        """An admin changed the settings or an agent: read them afresh, and look again."""
        self._facts.clear()
        self.wake()

    # --- asking for a slot --------------------------------------------------------------

    async def enqueue(self, *, run_key: str, effect_key: str, **values: Any) -> str:
        """Ask for a slot for a run (idempotent) and park its outbox row until granted;
        the request's state ("granted": another process runs it now). An urgent run that
        waits needs no pass to be seen: the first batch run at a model-turn boundary gives
        it its slot (`agents/running/preemption.py`)."""
        now = self.clock()
        async with self.db.write() as conn:
            state = await enqueue_request(
                conn, run_key=run_key, effect_key=effect_key, now=now, **values
            )
            if state != "granted":
                await hold_effect(conn, effect_key, now + PARK)
        log.debug("%s asks for a slot: %s", run_key, state)
        self.wake()
        return state

    # --- the loop -----------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.create_task(self._forever(), name="admission")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None

    def wake(self) -> None:
        """Run a pass now (a request was enqueued, a slot was freed)."""
        self._wake.set()

    async def _forever(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.run_pass()
            except Exception as exc:  # the loop must survive a database hiccup
                if is_storage_error(exc):  # an outage: one line a poll, not a traceback
                    log.warning("admission waits for the database: %s", storage_error(exc))
                else:
                    log.exception("admission pass failed; retrying")
            await woken(self._wake, self.options.poll_seconds)  # cancellable (see `woken`)

    async def run_pass(self) -> int:
        """One admission pass, then start what it granted; how many runs were granted."""
        async with self._passing:
            self.passes += 1
            seen = self.waits.generation
            async with self.db.read() as conn:  # one statement when nobody waits
                queue = await queued_requests(conn)
            idle = not any(r.state != "granted" for r in queue)
            if idle:
                self.waits.replace((), since=seen)
                await self._expire_only(queue)
                return 0
            async with self.db.write() as conn:
                result = await self._decide(conn)
                self.waits.replace(result.waiting_plans, since=seen)  # before it commits
            await self._start(result.granted)  # before another pass here can see no job
        await self._after(result)
        return len(result.granted)

    async def _expire_only(self, queue: list[RunRequestRecord]) -> None:
        """No one waits: still free the slots of a killed process (cheap when none)."""
        now = self.clock()
        if any(r.state == "granted" and r.lease_until and r.lease_until <= now for r in queue):
            async with self.db.write() as conn:
                await lock_admission(conn)
                await expire_grants(conn, now)
            self.wake()
        telemetry.queue_depth(queue)

    async def _decide(self, conn: AsyncConnection) -> PassResult:
        await lock_admission(conn)
        now = self.clock()
        await expire_grants(conn, now)
        await self._prune(conn, now)
        queue = await queued_requests(conn)
        telemetry.queue_depth(queue)
        granted = [r for r in queue if r.state == "granted"]
        waiting = [r for r in queue if r.state != "granted"]
        if not waiting:
            return PassResult()
        options = await self.options_now(conn)
        tenants = {(r.team_id, r.channel_id) for r in queue}
        budgets = await budgets_now(conn, options, tenants, now)
        telemetry.budget_remaining(budgets)
        limits = limits_of(options, budgets)
        limits = replace(limits, weights=weights_by_tenant(options, tenants))
        mine = sum(1 for r in granted if r.holder == self.owner)
        limits = with_room(limits, len(granted), mine, self.options.process_capacity)
        served = await served_since(conn, now - options.share_window)
        decision = self.decide(
            [waiting_of(r) for r in waiting], [running_of(r) for r in granted], limits, now, served
        )
        by_key = {r.run_key: r for r in queue}
        log.debug("admission pass: %d granted, %d waiting", len(decision.grants), len(waiting))
        return await self._apply(conn, decision, by_key, options, now)

    async def _apply(
        self,
        conn: AsyncConnection,
        decision: Admission,
        by_key: dict[str, RunRequestRecord],
        options: SchedulerOptions,
        now: datetime,
    ) -> PassResult:
        until = now + self.lease
        granted: list[RunRequestRecord] = []
        changed: set[tuple[int, int]] = set()
        refused: list[tuple[RunRequestRecord, str]] = []
        reasons: list[tuple[str, str, str]] = []  # written in one statement
        for key in decision.grants:
            record = by_key[key]
            if not await grant_request(conn, key, self.owner, now=now, until=until):
                continue  # no longer waiting
            await hold_effect(conn, record.effect_key, until)
            granted.append(record)
            telemetry.admitted(now - record.enqueued_at)
            if record.wait_reason is not None:
                changed |= _plan_of(record)
        for key, wait in decision.waits.items():
            record = by_key[key]
            if wait.kind == "budget" and options.budget_policy == "fail":
                if record.effect_kind in STEP_KINDS:
                    await drop_request(conn, key)
                    await finish_effect(conn, record.effect_key, now)
                    refused.append((record, wait.sentence.removeprefix("waiting: ")))
                    telemetry.refused("budget")
                    continue
            if record.state == "preempted" and wait.kind == "capacity":
                continue  # it says "paused for urgent work" until it runs again
            if record.wait_reason != wait.sentence:
                reasons.append((key, wait.kind, wait.sentence))
                changed |= _plan_of(record)
                telemetry.refused(wait.kind)
        await set_wait_reasons(conn, reasons)
        started = {r.run_key for r in granted}  # the plans of runs still waiting after it:
        left = frozenset(  # their cards read why (`WaitMarks`)
            r.plan_id
            for r in by_key.values()
            if r.plan_id is not None and r.state != "granted" and r.run_key not in started
        )
        return PassResult(tuple(granted), frozenset(changed), tuple(refused), left)

    async def _start(self, granted: tuple[RunRequestRecord, ...]) -> None:
        for record in granted:
            try:
                await self.start_run(record)
            except Exception:  # its lease expires and another pass grants it again
                log.exception("could not start %s", record.run_key)

    async def _after(self, result: PassResult) -> None:
        for record, reason in result.refused:
            with contextlib.suppress(Exception):
                await self.refuse(record, reason)
        for conversation_id, plan_id in sorted(result.changed_plans):
            try:
                await self.show_waits(conversation_id, plan_id)
            except Exception:  # the card shows the reason at its next update
                log.warning("could not show why plan %s waits", plan_id, exc_info=True)

    async def _prune(self, conn: AsyncConnection, now: datetime) -> None:
        window = self.options.share_window
        if self._pruned_at is None or now - self._pruned_at > window:
            self._pruned_at = now
            await prune_requests(conn, now - window)


def _plan_of(record: RunRequestRecord) -> set[tuple[int, int]]:
    if record.plan_id is None or record.conversation_id is None or record.step_index is None:
        return set()
    return {(record.conversation_id, record.plan_id)}


# --- stored requests as the pure policy sees them -------------------------------------------------


def waiting_of(r: RunRequestRecord) -> RunRequest:
    """A waiting request as the pure policy sees it (its tenant: workspace and channel)."""
    return RunRequest(
        key=r.run_key,
        tenant=tenant_of(r.team_id, r.channel_id),
        agent=r.agent_name,
        enqueued_at=r.enqueued_at,
        priority=r.priority,
        tools=tuple(r.tools),
        estimate_tokens=r.estimate_tokens,
        workspace=r.team_id,
    )


def running_of(r: RunRequestRecord) -> Running:
    """A granted request as the pure policy sees it."""
    return Running(
        key=r.run_key,
        tenant=tenant_of(r.team_id, r.channel_id),
        agent=r.agent_name,
        started_at=r.granted_at or r.enqueued_at,
        priority=r.priority,
        tools=tuple(r.tools),
        workspace=r.team_id,
    )
