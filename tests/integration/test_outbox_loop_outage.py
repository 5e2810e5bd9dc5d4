"""The executor's outbox loop while the database is away: one attempt a poll, not a spin.

Chaos experiment 3 (PostgreSQL stopped for a few seconds) logged ~250 "outbox delivery
waits for the database" lines a second: the loop kept the due time it had read before the
outage – a row already due – and so waited 0 s between failed passes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flotilla.agents.core.errors import StorageError
from flotilla.agents.delivering import executor as executor_module
from flotilla.agents.delivering.executor import Executor
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.agents.running.run_context import Context, ExecutorOptions
from flotilla.storage.db import Database
from flotilla.storage.migrate import upgrade
from flotilla.storage.outbox import enqueue_effects

NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)


class Stopped(Exception):
    """Ends the loop under test."""


async def test_the_outbox_loop_waits_a_poll_between_passes_while_the_database_is_away(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(sqlite_url)
    await upgrade(db)
    row: dict[str, Any] = {
        "idempotency_key": "k1",
        "kind": "retry_due",
        "conversation_id": None,
        "payload": {},
        "available_at": NOW - timedelta(minutes=1),
    }
    async with db.write() as conn:  # a row due when the outage begins
        await conn.run_sync(enqueue_effects, [row], NOW)
    options = ExecutorOptions(poll_seconds=2.0)
    parts: dict[str, Any] = dict(
        db=db,
        reconciler=Reconciler(db),
        port=None,
        choose_model=None,
        clock=lambda: NOW,
        options=options,
        observer=None,
    )
    context = Context(**parts)
    executor = Executor(context, owner="test")
    passes = 0

    async def drain(*, claim: bool = True) -> int:
        nonlocal passes
        passes += 1
        if passes > 1:  # the database went away after the first pass
            raise StorageError("the database is unreachable")
        return 0

    waits: list[float] = []

    async def woken(_event: object, seconds: float) -> bool:
        waits.append(seconds)
        if len(waits) == 4:
            raise Stopped
        return False

    monkeypatch.setattr(executor, "drain", drain)
    monkeypatch.setattr(executor_module, "woken", woken)
    with pytest.raises(Stopped):
        await executor._deliver_forever()
    await db.dispose()
    assert waits[0] == 0  # a row was due: looked at again at once
    assert waits[1:] == [2.0, 2.0, 2.0]  # the database away: one pass a poll
