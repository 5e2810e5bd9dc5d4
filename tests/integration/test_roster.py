"""The roster: one read of the agents serves many look-ups, until forgotten or too old."""

from __future__ import annotations

from datetime import UTC, datetime

from flotilla.agents.scheduling.roster import Roster
from flotilla.storage.agents import create_agent, update_agent
from flotilla.storage.db import Database
from tests.fakes.clock import FakeClock

NOW = datetime(2026, 12, 1, tzinfo=UTC)


async def test_one_read_serves_look_ups_until_forgotten_or_too_old(db: Database) -> None:
    async with db.write() as conn:
        await create_agent(conn, "T1", "writer", NOW, display_name="Writer")
        await create_agent(conn, "T1", "analyst", NOW, display_name="Analyst")
    clock = FakeClock()
    roster = Roster(db, lambda: "T1", max_age_s=2.0, monotonic=clock.monotonic)
    assert await roster.enabled_names() == ["analyst", "writer"]
    writer = await roster.agent("writer")
    assert writer is not None and await roster.agent("ghost") is None
    assert roster.reads == 1

    async with db.write() as conn:  # changed behind its back (e.g. by another replica)
        await update_agent(conn, "T1", "writer", NOW, enabled=False)
    assert await roster.enabled_names() == ["analyst", "writer"]  # not seen yet …
    clock.advance(2.0)
    assert await roster.enabled_names() == ["analyst"]  # … but within max_age_s
    assert roster.reads == 2

    async with db.write() as conn:
        await update_agent(conn, "T1", "writer", NOW, enabled=True)
    roster.forget()  # an admin's change in this process: seen at once
    assert await roster.enabled_names() == ["analyst", "writer"]
    assert roster.reads == 3
