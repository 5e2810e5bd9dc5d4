"""The durable inbox in Socket Mode, with `flotilla run` as a real process: the ack goes
out only after the request is stored; one that cannot be stored asks the person to try
again (a command) or is left unacked for Slack to send again (an event)."""

from __future__ import annotations

import asyncio
import sqlite3

from flotilla.bot.listeners.guard import TRY_AGAIN
from flotilla.bot.manifest import commander_manifest
from flotilla.local_slack.events import Delivery
from tests.e2e.test_run_process import World, world  # noqa: F401 (the fixture)

REFUSE_INBOX = """
CREATE TABLE refuse_inbox (flag INTEGER);
INSERT INTO refuse_inbox VALUES (1);
CREATE TRIGGER refuse_inbox_while_flagged BEFORE INSERT ON inbox
WHEN EXISTS (SELECT 1 FROM refuse_inbox)
BEGIN SELECT RAISE(ABORT, 'simulated storage failure'); END;
"""


def _execute(at: World, script: str) -> None:
    with sqlite3.connect(at.folder / "flotilla.db", timeout=30) as conn:
        conn.executescript(script)


def _inbox(at: World) -> list[tuple[str, bool]]:
    with sqlite3.connect(at.folder / "flotilla.db", timeout=30) as conn:
        rows = conn.execute("SELECT kind, processed_at FROM inbox ORDER BY id").fetchall()
    return [(kind, processed is not None) for kind, processed in rows]


async def test_socket_mode_stores_before_the_ack_and_asks_to_try_again_when_it_cannot(
    world: World,  # noqa: F811
) -> None:
    app = world.workspace.install_manifest(commander_manifest(), socket_mode=True)
    world.workspace.invite(world.workspace.state.channel_named("launch"), app)
    flotilla = world.process_for(app)
    await flotilla.start()
    await flotilla.started()
    driver = world.driver
    channel = world.workspace.state.channel_named("launch").id

    async def command(text: str) -> Delivery:  # to this app (world.app has /flotilla too)
        maya = driver.person("maya")
        return await world.workspace.interactivity.slash_command(
            maya, app, channel, "/flotilla", text
        )

    await asyncio.to_thread(_execute, world, REFUSE_INBOX)
    refused = await command("agents")
    assert [a.status for a in refused.attempts] == [200]  # acked, with the sentence
    await driver.wait_for(lambda: driver.ephemerals("maya"), what="the sentence")
    assert [e.text for e in driver.ephemerals("maya")] == [TRY_AGAIN]
    assert await asyncio.to_thread(_inbox, world) == []

    await asyncio.to_thread(_execute, world, "DELETE FROM refuse_inbox;")
    await command("agents")
    await driver.wait_for(lambda: len(driver.ephemerals("maya")) == 2, what="the agents")
    assert "researcher" in driver.ephemerals("maya")[1].text
    rows = await asyncio.to_thread(_inbox, world)
    assert [kind for kind, _ in rows] == ["command"]
    assert await flotilla.terminate() == 0
    assert await asyncio.to_thread(_inbox, world) == [("command", True)]
