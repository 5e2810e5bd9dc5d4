"""The per-conversation lock on both backends: read-modify-write never loses an update."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from flotilla.storage.db import Database
from flotilla.storage.events import events_t, record_event
from flotilla.storage.locks import ConversationLocks
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


async def _queued(*tasks: asyncio.Task[object]) -> None:
    """Let new tasks run up to their first wait (each queues for the lock in order)."""
    for _ in tasks:
        await asyncio.sleep(0)


async def test_one_process_serves_a_conversation_s_callers_one_at_a_time_in_arrival_order(
    db: Database,
) -> None:
    cid = await new_conversation(db, "4.3")
    locks = ConversationLocks()
    order: list[str] = []

    def note(name: str) -> Callable[[Connection], None]:
        return lambda conn: order.append(name)

    await locks._acquire(cid)  # the test holds the conversation; three callers line up
    tasks = [asyncio.create_task(locks.run(db, cid, note(name))) for name in "abc"]
    await _queued(*tasks)
    assert order == []  # nobody ran while it was held
    locks._release(cid)
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c"]
    assert locks._held == {}  # nothing is kept once nobody holds it


@dataclass
class TwoInLine:
    """The test holds a conversation; two callers wait for it, first and second."""

    locks: ConversationLocks
    conversation: int
    order: list[str]
    first: asyncio.Task[object]
    second: asyncio.Task[object]


async def two_in_line(db: Database, thread: str) -> TwoInLine:
    cid = await new_conversation(db, thread)
    locks = ConversationLocks()
    order: list[str] = []
    await locks._acquire(cid)
    first = asyncio.create_task(locks.run(db, cid, lambda conn: order.append("first")))
    second = asyncio.create_task(locks.run(db, cid, lambda conn: order.append("second")))
    await _queued(first, second)
    return TwoInLine(locks, cid, order, first, second)


async def test_a_caller_cancelled_while_waiting_is_skipped(db: Database) -> None:
    line = await two_in_line(db, "4.4")
    line.first.cancel()
    await asyncio.gather(line.first, return_exceptions=True)
    line.locks._release(line.conversation)
    await line.second
    assert line.order == ["second"] and line.first.cancelled()
    assert line.locks._held == {}


async def test_a_caller_cancelled_as_its_turn_comes_passes_the_turn_on(db: Database) -> None:
    """Its turn given, it is cancelled before it resumes: the next caller still runs."""
    line = await two_in_line(db, "4.5")
    line.locks._release(line.conversation)  # the turn is the first caller's now
    line.first.cancel()  # before it resumed
    await asyncio.gather(line.first, return_exceptions=True)
    await asyncio.wait_for(line.second, 60)  # a turn lost with the cancelled caller: never runs
    assert line.order == ["second"] and line.first.cancelled()
    assert line.locks._held == {}
