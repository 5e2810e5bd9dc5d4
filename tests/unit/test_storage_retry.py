"""The store before an ack is retried while the database is busy, within its budget, and
only for storage errors."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy.exc import OperationalError

from flotilla.agents.reconciling.inbox import retry_storage

LOCKED = OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))


async def test_a_locked_database_is_tried_again_until_it_is_free() -> None:
    tries = 0

    async def store() -> str:
        nonlocal tries
        tries += 1
        if tries < 3:
            raise LOCKED
        return "stored"

    assert await retry_storage(store) == "stored"
    assert tries == 3


async def test_other_errors_are_not_tried_again() -> None:
    tries = 0

    async def store() -> None:
        nonlocal tries
        tries += 1
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        await retry_storage(store)
    assert tries == 1


async def test_it_gives_up_within_its_budget() -> None:
    tries, waits = 0, []

    async def store() -> None:
        nonlocal tries
        tries += 1
        raise LOCKED

    async def sleep(seconds: float) -> None:  # the waits, counted instead of slept
        waits.append(seconds)

    with pytest.raises(OperationalError):
        await retry_storage(store, sleep=sleep)
    # the before-ack policy: 50 ms doubling; the next wait (1 s) would pass the 2 s budget
    assert waits == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.8])
    assert tries == 6
    waits.clear()
    with pytest.raises(OperationalError):
        await retry_storage(store, budget=0.2, sleep=sleep)
    assert waits == pytest.approx([0.05, 0.1])
