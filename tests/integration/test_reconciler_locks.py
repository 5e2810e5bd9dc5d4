"""The per-conversation lock on both backends: read-modify-write never loses an update."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from storage.db import Database
from storage.events import events_t, record_event
from storage.locks import ConversationLocks
from tests.integration.reconcile_support import T0, new_conversation


def count_then_insert(prefix: str) -> Callable[[Connection], bool]:
    """Read how many keys exist, then write key n+1: two unserialised callers collide."""

    def work(conn: Connection) -> bool:
        n = conn.scalar(
            select(func.count()).select_from(events_t).where(events_t.c.key.like(f"{prefix}%"))
        )
        return record_event(conn, f"{prefix}{n}", T0)

    return work


@pytest.mark.parametrize("lock_name", ["conversation", "key"])
async def test_concurrent_units_of_work_are_serialised(db: Database, lock_name: str) -> None:
    """20 callers, each with its own in-process locks, so only the database lock helps."""
    cid = await new_conversation(db, "4.1")
    target: int | str = cid if lock_name == "conversation" else "T1:C1:9.999"
    work = count_then_insert(f"{lock_name}:")
    results = await asyncio.gather(*(ConversationLocks().run(db, target, work) for _ in range(20)))
    assert results == [True] * 20  # every caller saw the previous one's key


async def test_a_failing_unit_of_work_rolls_back_and_releases_the_lock(db: Database) -> None:
    cid = await new_conversation(db, "4.2")
    locks = ConversationLocks()

    def fail(conn: Connection) -> None:
        record_event(conn, "rolled-back", T0)
        raise RuntimeError("the decision failed")

    with pytest.raises(RuntimeError):
        await locks.run(db, cid, fail)
    assert await locks.run(db, cid, lambda conn: record_event(conn, "rolled-back", T0))
