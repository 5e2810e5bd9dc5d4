"""The optimistic reconcile on PostgreSQL: a write after another writer moved the
conversation on writes nothing, and the reconcile decides again on what is stored."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.engine import Connection

from agents.plan import StepSucceeded
from agents.reconciler import Reconciler
from storage.db import Database
from storage.locks import ConversationLocks
from storage.migrate import upgrade
from storage.optimistic import PlanWrite, VersionConflict, load_versioned, write_versioned
from tests.conftest import PostgresSchema, postgres_url
from tests.integration.reconcile_support import (
    AGENTS,
    T0,
    Clock,
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
    await Reconciler(pg, clock=Clock()).start_plan(cid, chain(2), assignees=AGENTS)
    locks = ConversationLocks()
    read = await locks.run_optimistic(
        pg, cid, lambda conn: load_versioned(conn, cid, event_key="e1")
    )
    assert read is not None and not read.event_seen
    await locks.run(pg, cid, lambda conn: None)  # a locked writer: the version moves on

    def write(conn: Connection) -> None:
        plan_id = int(read.loaded.plan["id"])
        write_versioned(conn, cid, read.lock_version, PlanWrite(plan_id), event_key="e1", now=T0)

    with pytest.raises(VersionConflict):
        await locks.run_optimistic(pg, cid, write, max_tries=1)
    again = await locks.run_optimistic(
        pg, cid, lambda conn: load_versioned(conn, cid, event_key="e1")
    )
    assert again is not None and not again.event_seen  # nothing of the write was kept
    assert again.lock_version == read.lock_version + 1


async def test_racing_reconcilers_apply_each_result_once(pg: Database) -> None:
    """Ten reconcilers (each with its own in-process locks, as replicas have) deliver the
    same results at once: every step is dispatched once, the plan completes."""
    cid = await new_conversation(pg, "opt.2")
    await Reconciler(pg, clock=Clock()).start_plan(cid, chain(4), assignees=AGENTS)
    replicas = [Reconciler(pg, locks=ConversationLocks(), clock=Clock()) for _ in range(10)]
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
