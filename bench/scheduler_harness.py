"""The scheduler benchmark's harness (`bench/scheduler.py`): admission loops as processes
on one database, simulated runs of fixed-length model turns, FIFO through the same loop,
and a count of statements and transactions."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event

from flotilla.agents.scheduling.admission import AdmissionLoop
from flotilla.agents.scheduling.admission_policy import SchedulerOptions
from flotilla.agents.scheduling.scheduler import (
    PREEMPTIBLE_FROM,
    URGENT,
    Admission,
    Limits,
    Running,
    RunRequest,
    Wait,
    admit,
)
from flotilla.storage.db import Database
from flotilla.storage.migrate import upgrade
from flotilla.storage.records import RunRequestRecord
from flotilla.storage.run_request_leases import (
    finish_request,
    give_way,
    renew_request,
    urgent_waits,
)
from flotilla.storage.run_requests import get_request

LEASE = timedelta(seconds=30)


def fifo(
    waiting: Sequence[RunRequest],
    running: Sequence[Running],
    limits: Limits,
    now: datetime,
    served: Mapping[str, float] | None = None,
) -> Admission:
    """First come, first served with the same capacity (the order before the scheduler)."""
    ordered = sorted(waiting, key=lambda r: (r.enqueued_at, r.key))
    free = max(0, limits.capacity - len(running))
    grants = tuple(r.key for r in ordered[:free])
    waits = {r.key: Wait("capacity", "waiting") for r in ordered[free:]}
    return Admission(grants, waits)


class Clock:
    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


class Counted:
    """Statements and transactions sent through a database's engine."""

    def __init__(self, db: Database) -> None:
        self.statements = 0
        self.transactions = 0
        event.listen(db.engine.sync_engine, "before_cursor_execute", self._statement)
        event.listen(db.engine.sync_engine, "commit", self._commit)

    def _statement(self, *_: Any) -> None:
        self.statements += 1

    def _commit(self, *_: Any) -> None:
        self.transactions += 1


@dataclass
class Harness:
    """Admission loops ("processes") on one database and the simulated runs they start."""

    url: str
    turn: float  # seconds per model turn (0: zero latency)
    decide: object = admit
    capacity: int = 4
    process_capacity: int = 4
    processes: int = 3
    weights: Mapping[str, float] = field(default_factory=dict)
    lease: timedelta = LEASE
    poll_seconds: float = 1.0
    clock: Clock = field(default_factory=Clock)
    loops: list[AdmissionLoop] = field(default_factory=list)
    dbs: list[Database] = field(default_factory=list)
    counters: list[Counted] = field(default_factory=list)
    turns_needed: dict[str, int] = field(default_factory=dict)
    stored: dict[str, list[int]] = field(default_factory=dict)  # each run's stored turns
    paid: int = 0  # model turns paid for, re-paid ones included
    enqueued: dict[str, float] = field(default_factory=dict)
    granted: dict[str, float] = field(default_factory=dict)
    grant_log: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    finished: set[str] = field(default_factory=set)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    dead: set[str] = field(default_factory=set)
    resumes: Counter[str] = field(default_factory=Counter)  # grants after the first
    boundaries: int = 0  # turn boundaries reached (where a kill may fall)
    boundary_at: list[tuple[str, float]] = field(default_factory=list)  # run, when
    paused_at: list[float] = field(default_factory=list)  # a run reached its boundary, paused
    yields: int = 0  # runs that gave their slot to urgent work

    async def start(self, *, run: bool = True) -> None:
        for i in range(self.processes):
            self.add_process(f"p{i}")
        if run:
            self.run()

    def add_process(self, owner: str) -> AdmissionLoop:
        options = SchedulerOptions(
            capacity=self.capacity,
            process_capacity=self.process_capacity,
            poll_seconds=self.poll_seconds,
            weights=dict(self.weights),
        )
        db = Database(self.url)
        loop = AdmissionLoop(
            db,
            owner=owner,
            team_id=lambda: "T",
            clock=self.clock,
            options=options,
            lease=self.lease,
            start=self._starter(db, owner),
            show_waits=_nothing,
            refuse=_refused,
            decide=self.decide,  # type: ignore[arg-type]
        )
        self.loops.append(loop)
        self.dbs.append(db)
        self.counters.append(Counted(db))
        return loop

    def run(self) -> None:
        """Start the loops' passes."""
        for loop in self.loops:
            loop.start()

    async def stop(self) -> None:
        for loop in self.loops:
            await loop.stop()
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        for db in self.dbs:
            await db.dispose()

    async def ask(self, key: str, tenant: str, turns: int, priority: int = 3) -> None:
        self.turns_needed[key] = turns
        self.stored.setdefault(key, [])
        self.enqueued[key] = time.perf_counter()
        alive = [loop for loop in self.loops if loop.owner not in self.dead]
        await alive[len(self.enqueued) % len(alive)].enqueue(
            run_key=key,
            effect_key=f"outbox:{key}",
            effect_kind="post_dispatch",
            effect={},
            conversation_id=None,
            team_id="T",
            channel_id=tenant,
            agent_name="researcher",
            plan_id=None,
            step_index=None,
            attempt=None,
            priority=priority,
            estimate_tokens=0,
            tools=[],
        )

    def _starter(self, db: Database, owner: str):  # type: ignore[no-untyped-def]
        async def start(record: RunRequestRecord) -> None:
            if record.run_key in self.granted:
                self.resumes[record.run_key] += 1
            self.granted.setdefault(record.run_key, time.perf_counter())
            waiting = Counter(k.split("-")[0] for k in self.enqueued if k not in self.granted)
            self.grant_log.append((record.channel_id, dict(waiting)))
            task = asyncio.create_task(self._run(db, owner, record))
            task.add_done_callback(_report_failure)
            self.tasks[record.run_key] = task

        return start

    async def _run(self, db: Database, owner: str, record: RunRequestRecord) -> None:
        key = record.run_key
        turns = self.stored[key]
        while len(turns) < self.turns_needed[key]:
            await asyncio.sleep(self.turn)
            self.paid += 1
            if owner in self.dead:
                return  # killed mid-turn: this turn was paid, never stored
            turns.append(len(turns))  # the history is stored after every turn
            if len(turns) == self.turns_needed[key]:
                break
            self.boundaries += 1
            at = time.perf_counter()
            self.boundary_at.append((key, at))
            passed: RunRequestRecord | None = None
            async with db.write() as conn:  # the turn boundary: the turn is stored here
                until = self.clock() + self.lease
                await renew_request(conn, key, owner, until)
                # as a job's stored turn: does urgent work wait for this run's slot? Then
                # it is handed over at once, unless another run at its boundary was first
                if await urgent_waits(
                    conn, key, priority_at_most=URGENT, yields_from=PREEMPTIBLE_FROM
                ):
                    urgent = await give_way(
                        conn, key, owner, now=self.clock(), until=until, priority_at_most=URGENT
                    )
                    passed = await get_request(conn, urgent) if urgent else None
            if passed is not None:
                self.paused_at.append(at)
                self.yields += 1
                await self._starter(db, owner)(passed)
                self._wake_all()
                return
        async with db.write() as conn:
            await finish_request(conn, key, self.clock())
        self.finished.add(key)
        self.done.set()
        self._wake_all()

    def _wake_all(self) -> None:
        for loop in self.loops:
            if loop.owner not in self.dead:
                loop.wake()

    async def until_done(self, keys: list[str]) -> None:
        while True:
            self.done.clear()
            if all(k in self.finished for k in keys):
                return
            await self.done.wait()


def _report_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        print(f"a simulated run failed: {task.exception()!r}", file=sys.stderr)


async def _nothing(conversation_id: int, plan_id: int) -> None:
    return None


async def _refused(record: RunRequestRecord, reason: str) -> None:
    return None


async def fresh(tmp: Path, name: str) -> str:
    url = f"sqlite+aiosqlite:///{tmp / name}.db"
    db = Database(url)
    await upgrade(db)
    await db.dispose()
    return url
