"""The optimistic reconcile on PostgreSQL: a write after another writer moved the
conversation on writes nothing, and the reconcile decides again on what is stored."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection
from sqlalchemy.exc import IntegrityError

import flotilla.storage.db
import flotilla.storage.locks
from flotilla.agents.planning.plan import StepSucceeded
from flotilla.agents.reconciling import reconcile_units
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.storage.conversations import conversations_t
from flotilla.storage.db import Database
from flotilla.storage.events import events_t
from flotilla.storage.locks import ConversationLocks
from flotilla.storage.migrate import upgrade
from flotilla.storage.optimistic import PlanWrite, VersionConflict, load_versioned, write_versioned
from flotilla.storage.plan_steps import steps_t
from flotilla.storage.prepared import DriverConnection
from flotilla.storage.sql import ConcurrentPlanChange
from tests.conftest import PostgresSchema, postgres_url
from tests.fakes.clock import FakeClock
from tests.integration.reconcile_support import (
    AGENTS,
    T0,
    chain,
    new_conversation,
    outbox_keys,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg() -> AsyncIterator[Database]:
    """A migrated throw-away schema on PostgreSQL (the optimistic path is PostgreSQL's)."""
    schema = PostgresSchema(postgres_url())
    await schema.create()
    db = schema.database()
    try:
        await upgrade(db)
        yield db
    finally:
        await db.dispose()
        await schema.drop()


async def test_a_write_after_a_locked_writer_is_a_conflict_and_writes_nothing(
    pg: Database,
) -> None:
    cid = await new_conversation(pg, "opt.1")
    await Reconciler(pg, clock=FakeClock(T0)).start_plan(cid, chain(2), assignees=AGENTS)
    locks = ConversationLocks()
    read = await locks.run_optimistic(pg, cid, lambda d: load_versioned(d, cid, event_key="e1"))
    assert read is not None and not read.event_seen
    await locks.run(pg, cid, lambda conn: None)  # a locked writer: the version moves on

    async def write(conn: DriverConnection) -> None:
        plan_id = int(read.loaded.plan["id"])
        await write_versioned(
            conn, cid, read.lock_version, PlanWrite(plan_id), event_key="e1", now=T0
        )

    with pytest.raises(VersionConflict):
        await locks.run_optimistic(pg, cid, write, max_tries=1)
    again = await locks.run_optimistic(pg, cid, lambda d: load_versioned(d, cid, event_key="e1"))
    assert again is not None and not again.event_seen  # nothing of the write was kept
    assert again.lock_version == read.lock_version + 1


async def test_racing_reconcilers_apply_each_result_once(pg: Database) -> None:
    """Ten reconcilers (each with its own in-process locks, as replicas have) deliver the
    same results at once: every step is dispatched once, the plan completes."""
    cid = await new_conversation(pg, "opt.2")
    await Reconciler(pg, clock=FakeClock(T0)).start_plan(cid, chain(4), assignees=AGENTS)
    replicas = [Reconciler(pg, locks=ConversationLocks(), clock=FakeClock(T0)) for _ in range(10)]
    for index in range(1, 5):
        outcome = StepSucceeded(index=index, attempt=1, summary=f"done {index}")
        decisions = await asyncio.gather(
            *(
                r.reconcile(cid, event_key=f"done:{index}:{n % 3}", outcomes=[outcome])
                for n, r in enumerate(replicas)
            )
        )
        assert sum(d is not None and d.changed for d in decisions) == 1
    plan = await replicas[0].plan(cid)
    assert plan is not None and plan.status == "completed"
    keys = await outbox_keys(pg, "post_dispatch")
    assert len(keys) == 4 and max(Counter(keys).values()) == 1


async def test_a_reconcile_whose_write_conflicts_reads_again_and_writes_once(
    pg: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A locked writer moves the conversation on between a reconcile's read and its write
    (on asyncpg's connection directly): the write is a conflict that keeps nothing, and the
    reconcile reads, decides and writes again – the result recorded once, the next step
    dispatched once."""
    cid = await new_conversation(pg, "opt.3")
    reconciler = Reconciler(pg, clock=FakeClock(T0))
    await reconciler.start_plan(cid, chain(2), assignees=AGENTS)
    before = await pg_lock_version(pg, cid)
    writes: list[int] = []

    async def interrupted(conn: DriverConnection, *args: Any, **kwargs: Any) -> dict[str, int]:
        writes.append(args[1])  # the lock version read
        if len(writes) == 1:  # another replica's locked writer, between the read and the write
            await ConversationLocks().run(pg, cid, lambda conn: None)
        return await write_versioned(conn, *args, **kwargs)

    monkeypatch.setattr(reconcile_units, "write_versioned", interrupted)
    outcome = StepSucceeded(index=1, attempt=1, summary="done 1")
    decision = await reconciler.reconcile(cid, event_key="done:1", outcomes=[outcome])
    assert decision is not None and decision.changed
    assert writes == [before, before + 1]  # the second write read what the first missed
    assert await pg_lock_version(pg, cid) == before + 2
    keys = await outbox_keys(pg, "post_dispatch")
    assert len(keys) == 2 and max(Counter(keys).values()) == 1  # step 1 at the start, step 2
    async with pg.read() as conn:
        events = (await conn.execute(select(func.count()).select_from(events_t))).scalar_one()
    assert events == 1


async def test_a_driver_error_is_raised_as_sqlalchemy_raises_it(pg: Database) -> None:
    """A duplicate event key on the optimistic write (asyncpg's UniqueViolationError) is
    SQLAlchemy's IntegrityError, as on SQLAlchemy's own path; the pooled connection is
    usable afterwards."""
    cid = await new_conversation(pg, "opt.4")
    await Reconciler(pg, clock=FakeClock(T0)).start_plan(cid, chain(1), assignees=AGENTS)
    locks = ConversationLocks()

    async def write_twice(conn: DriverConnection) -> None:
        for _ in range(2):
            read = await load_versioned(conn, cid)
            assert read is not None
            plan = PlanWrite(int(read.loaded.plan["id"]))
            await write_versioned(conn, cid, read.lock_version, plan, event_key="e1", now=T0)

    with pytest.raises(IntegrityError):
        await locks.run_optimistic(pg, cid, write_twice)
    read = await locks.run_optimistic(pg, cid, lambda d: load_versioned(d, cid, event_key="e1"))
    assert read is not None and read.event_seen


async def pg_lock_version(db: Database, cid: int) -> int:
    async with db.read() as conn:
        query = select(conversations_t.c.lock_version).where(conversations_t.c.id == cid)
        return int((await conn.execute(query)).scalar_one())


async def test_a_step_changed_behind_the_version_fails_the_write_whole(pg: Database) -> None:
    """A step not as read under a matching lock version (a writer that bypassed both) fails
    the one statement: `ConcurrentPlanChange`, nothing of it kept (the event not recorded)."""
    cid = await new_conversation(pg, "opt.5")
    await Reconciler(pg, clock=FakeClock(T0)).start_plan(cid, chain(1), assignees=AGENTS)
    locks = ConversationLocks()
    read = await locks.run_optimistic(pg, cid, lambda d: load_versioned(d, cid))
    assert read is not None
    step = read.loaded.steps[0] if read.loaded.steps else {}
    async with pg.write() as conn:  # behind the version's back
        await conn.execute(
            update(steps_t)
            .where(steps_t.c.plan_id == read.loaded.plan["id"], steps_t.c.index == 1)
            .values(attempts=step["attempts"] + 1)
        )
    changed = ({"index": 1, "status": "succeeded"}, step["status"], step["attempts"])
    write = PlanWrite(int(read.loaded.plan["id"]), changed=[changed])

    async def stale(conn: DriverConnection) -> None:
        await write_versioned(conn, cid, read.lock_version, write, event_key="e1", now=T0)

    with pytest.raises(ConcurrentPlanChange):
        await locks.run_optimistic(pg, cid, stale)
    again = await locks.run_optimistic(pg, cid, lambda d: load_versioned(d, cid, event_key="e1"))
    assert again is not None and not again.event_seen
    assert again.lock_version == read.lock_version


async def test_a_held_connection_idle_too_long_is_pinged_before_its_next_reconcile(
    pg: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The optimistic path keeps its connections out of the pool between reconciles; one
    idle too long goes back, and the pool's checkout pings it as it would have (storage.db)."""
    pings = Counter[str]()
    ping: Any = AsyncAdapt_asyncpg_connection.ping

    def counted(self: AsyncAdapt_asyncpg_connection) -> None:
        pings["ping"] += 1
        ping(self)

    monkeypatch.setattr(AsyncAdapt_asyncpg_connection, "ping", counted)
    locks = ConversationLocks()

    async def work(driver: DriverConnection) -> Any:
        return await driver.driver.fetchval("SELECT 1")

    await locks.run_optimistic(pg, 1, work)  # one connection held now
    before = pings["ping"]
    await locks.run_optimistic(pg, 1, work)  # used a moment ago: no ping
    assert pings["ping"] == before
    # ten seconds later, as both modules see it (no sleep needed)
    later = SimpleNamespace(monotonic=lambda: time.monotonic() + 10.0)
    monkeypatch.setattr(flotilla.storage.locks, "time", later)
    monkeypatch.setattr(flotilla.storage.db, "time", later)
    assert await locks.run_optimistic(pg, 1, work) == 1
    assert pings["ping"] == before + 1
