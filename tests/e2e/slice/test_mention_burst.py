"""A burst of 30 simultaneous mentions on SQLite while another writer holds the database's
write lock (a loaded machine's slow transaction): every mention is stored before its ack –
waiting on SQLite's busy timeout, retried on "database is locked", refused with a 500 for
Slack to send again only as the last resort – and every one is answered once."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import text

from tests.e2e.slice.test_inbox import mentions

BURST = 30


SLOW_WRITE_S = 1.0  # how long the other writer keeps the lock once the burst is in


def hold_write_lock(database: Path, held: threading.Event, release: threading.Event) -> None:
    """Hold SQLite's write lock (an open write transaction) until `release` is set, and a
    second longer: the slow transaction of a loaded machine."""
    conn = sqlite3.connect(database, timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        held.set()
        release.wait(30)
        threading.Event().wait(SLOW_WRITE_S)  # the transaction's own length, not a poll
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_thirty_simultaneous_mentions_on_sqlite_lose_none(
    start: Callable[..., Any], tmp_path: Path
) -> None:
    async with start(retry_delays=(0.0, 1.0, 2.0, 4.0)) as run:
        await run.quiesce()
        held, release = threading.Event(), threading.Event()
        holder = asyncio.create_task(
            asyncio.to_thread(hold_write_lock, tmp_path / "e2e.db", held, release)
        )
        await asyncio.to_thread(held.wait, 30)
        roots = [run.ask(f"question {n}: what time zone is launch {n} in?") for n in range(BURST)]
        deliveries = run.stack.workspace.events.deliveries
        # every mention is at Flotilla's door, waiting on the lock, before it is let go
        await run.driver.wait_for(
            lambda: len(mentions(deliveries)) == BURST, what="thirty mentions sent"
        )
        release.set()
        await holder
        for root in roots:
            await run.says(root, "[offline model]", from_="Flotilla")
        await run.quiesce()
        for root in roots:
            answers = [m for m in run.messages(root) if m.text.startswith("[offline model]")]
            assert len(answers) == 1, run.transcript(root)
        async with run.service.db.read() as conn:
            stored = (await conn.execute(text("SELECT count(*) FROM conversations"))).scalar_one()
        assert stored == BURST
        # a first attempt that timed out behind the lock is acked by Slack's retry
        await run.driver.deliveries_finished(timeout=30)
        assert all(d.acked for d in mentions(deliveries))
