"""Nothing is lost between Slack and the database: a message Flotilla acts on is stored
before Slack gets its ack, and a message that cannot be stored is refused so Slack sends it
again."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flotilla.local_slack.events import Delivery
from flotilla.storage import migrate
from flotilla.storage.db import Database
from tests.throwaway_postgres import ThrowawayPostgres

REFUSE = """
CREATE TABLE refuse_events (flag INTEGER);
INSERT INTO refuse_events VALUES (1);
CREATE TRIGGER refuse_while_flagged BEFORE INSERT ON processed_events
WHEN EXISTS (SELECT 1 FROM refuse_events)
BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END;
"""


def _execute(database: Path, script: str) -> None:
    with sqlite3.connect(database, timeout=30) as conn:
        conn.executescript(script)


def mentions(deliveries: list[Delivery]) -> list[Delivery]:
    return [d for d in deliveries if (d.payload.get("event") or {}).get("type") == "app_mention"]


async def test_a_mention_that_cannot_be_stored_is_sent_again_not_lost(
    start: Callable[..., Any], tmp_path: Path
) -> None:
    # Slack's retries, shortened: the second comes after the storage is back
    async with start(retry_delays=(0.0, 2.0, 5.0)) as run:
        database = tmp_path / "e2e.db"
        await run.quiesce()
        # the storage refuses every new event (in a thread: the stack shares this loop)
        await asyncio.to_thread(_execute, database, REFUSE)
        root = run.ask("what time zone is the launch in?")
        deliveries = run.stack.workspace.events.deliveries

        def refused() -> list[Delivery]:
            return [d for d in mentions(deliveries) if any(a.status == 500 for a in d.attempts)]

        await run.driver.wait_for(refused, what="the mention refused while it cannot be stored")
        await asyncio.to_thread(_execute, database, "DELETE FROM refuse_events;")  # back
        await run.says(root, "[offline model]", from_="Flotilla")
        (delivery,) = mentions(deliveries)
        assert delivery.attempts[0].status == 500 and delivery.acked
        await run.quiesce()
        answers = [m for m in run.messages(root) if m.text.startswith("[offline model]")]
        assert len(answers) == 1  # stored once, answered once


@pytest.mark.postgres
async def test_a_mention_during_a_database_outage_is_a_warning_and_answered_once(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Found by the chaos suite (bench/chaos, experiment 3): each refused delivery logged a
    traceback, and so did the admission loop at every poll of the outage."""
    caplog.set_level(logging.INFO)
    server = ThrowawayPostgres()  # its own throw-away server: this test stops it
    try:
        await server.start()
        db = Database(server.url)
        try:
            await migrate.upgrade(db)
            async with start(db=db, retry_delays=(0.0, 3.0, 6.0)) as run:
                await run.quiesce()
                await server.stop()  # the database goes away
                root = run.ask("what time zone is the launch in?")
                deliveries = run.stack.workspace.events.deliveries

                def refused() -> list[Delivery]:
                    return [
                        d for d in mentions(deliveries) if any(a.status == 500 for a in d.attempts)
                    ]

                await run.driver.wait_for(refused, what="the mention refused during the outage")
                await server.start()  # back before Slack's next attempt
                await run.says(root, "[offline model]", from_="Flotilla")
                await run.quiesce()
                answers = [m for m in run.messages(root) if m.text.startswith("[offline model]")]
                assert len(answers) == 1
        finally:
            await db.dispose()
        warned = [r for r in caplog.records if "could not record a app_mention" in r.message]
        assert warned and all(r.levelno == logging.WARNING for r in warned)
        assert not [r for r in caplog.records if r.exc_info], "tracebacks during an outage"
    finally:
        server.remove()
