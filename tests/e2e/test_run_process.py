"""`flotilla run` as an operator runs it: a child process configured by the environment,
driven over HTTP by the local Slack workspace; stopped by SIGTERM, SIGINT or kill -9."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest

from flotilla.bot.manifest import commander_manifest
from flotilla.local_slack import Driver, InstalledApp, LocalWorkspace
from flotilla.storage.agents import update_agent
from flotilla.storage.db import Database
from tests.e2e.flotilla_process import FlotillaProcess
from tests.fakes.openai_server import FakeOpenAI, text_message

SUMMARY_REQUEST = "research our launch emails and write a short report"
# a lease far longer than any wait here: only a hand-over lets another process take a step
LONG_LEASE = {"FLOTILLA_RUN_LEASE_SECONDS": "600", "FLOTILLA_HEARTBEAT_SECONDS": "5"}
# real `flotilla run` processes started and killed: one test at a time with the other such
# tests (tests/e2e/test_scheduler_kill.py), in one xdist worker, so their starts never pile up
pytestmark = pytest.mark.xdist_group("processes")


class World:
    def __init__(self, workspace: LocalWorkspace, folder: Path) -> None:
        self.workspace = workspace
        self.folder = folder
        self.app: InstalledApp = workspace.install_manifest(commander_manifest(), socket_mode=False)
        self.maya = workspace.add_person("maya")
        workspace.create_channel("launch", [self.maya, self.app])
        self.driver = Driver(workspace, default_timeout=60.0)
        self.database_url = f"sqlite+aiosqlite:///{folder / 'flotilla.db'}"
        self.processes: list[FlotillaProcess] = []

    def process(self, **settings: str) -> FlotillaProcess:
        return self.process_for(self.app, **settings)

    def process_for(self, app: InstalledApp, **settings: str) -> FlotillaProcess:
        process = FlotillaProcess(self.workspace, app, self.database_url, self.folder, **settings)
        self.processes.append(process)
        return process


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    workspace = LocalWorkspace()
    await workspace.start("127.0.0.1", 0)
    world = World(workspace, tmp_path)
    try:
        yield world
    finally:
        for process in world.processes:
            await process.kill()
        await workspace.stop()


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def post(url: str, body: bytes, content_type: str) -> int:
    headers = {"Content-Type": content_type}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        return response.status


def messages(process: FlotillaProcess) -> list[str]:
    return [str(line.get("message", "")) for line in process.lines]


async def test_serves_a_plan_then_stops_cleanly_on_sigterm(world: World) -> None:
    flotilla = world.process()
    await flotilla.start()
    started = await flotilla.started()
    assert "HTTP mode" in started["message"] and "model offline" in started["message"]
    assert world.database_url in started["message"] and started["team"]

    assert (await get(f"{flotilla.url}/healthz"))[0] == 200
    assert (await get(f"{flotilla.url}/readyz"))[0] == 200
    for body, kind in (
        (b"{not json", "application/json"),
        (b"\xff\xfe", "text/plain"),
        (b"payload=%7B%7D", "application/x-www-form-urlencoded"),
    ):
        status = await post(f"{flotilla.url}/slack/events", body, kind)
        assert 400 <= status < 500, (body, status)  # refused (unsigned or unreadable), no 500
    root = world.driver.mention("maya", "launch", world.app, SUMMARY_REQUEST)
    await world.driver.thread_has_message("launch", root.ts, containing="[offline model]")
    status, metrics = await get(f"{flotilla.url}/metrics")
    assert status == 200
    for name in (
        'flotilla_slack_api_calls_total{method="chat.postMessage",outcome="ok"}',
        'flotilla_model_requests_total{model="function:offline",outcome="succeeded"}',
        'flotilla_slack_request_seconds_count{kind="event"}',
        "flotilla_outbox_pending ",
        "flotilla_outbox_oldest_pending_seconds ",
        "process_cpu_seconds_total",
        "python_info",
    ):
        assert name in metrics, name

    assert await flotilla.terminate(signal.SIGTERM) == 0
    said = messages(flotilla)
    assert "received SIGTERM: stopping" in said and said[-1] == "stopped"
    # one JSON object per line, no traceback, no Bolt "token will be unused" warning
    assert len(flotilla.lines) == len(flotilla.raw)
    assert not [raw for raw in flotilla.raw if "Traceback" in raw or "will be unused" in raw]


async def test_socket_mode_serves_a_plan_and_stops(world: World) -> None:
    app = world.workspace.install_manifest(commander_manifest(), socket_mode=True)
    world.workspace.invite(world.workspace.state.channel_named("launch"), app)
    flotilla = world.process_for(app)
    await flotilla.start()
    started = await flotilla.started()
    assert "Socket mode" in started["message"] and "/slack/events" not in started["message"]
    root = world.driver.mention("maya", "launch", app, SUMMARY_REQUEST)
    await world.driver.thread_has_message("launch", root.ts, containing="[offline model]")
    assert await flotilla.terminate() == 0
    assert messages(flotilla)[-1] == "stopped"


async def test_sigint_stops_too_and_a_killed_process_leaves_a_usable_database(
    world: World,
) -> None:
    first = world.process()
    await first.start()
    await first.started()
    assert await first.terminate(signal.SIGINT) == 0
    assert "received SIGINT: stopping" in messages(first)

    second = world.process()
    await second.start()
    await second.started()
    await second.terminate(signal.SIGKILL)  # kill -9: no clean-up at all

    third = world.process()
    await third.start()
    await third.started()
    assert (await get(f"{third.url}/readyz"))[0] == 200
    root = world.driver.mention("maya", "launch", world.app, SUMMARY_REQUEST)
    await world.driver.thread_has_message("launch", root.ts, containing="[offline model]")
    assert await third.terminate() == 0


async def test_sigterm_hands_a_running_step_to_the_next_process_at_once(world: World) -> None:
    """The researcher's model answers only when the test says so: SIGTERM arrives while
    its step runs; after the grace period the step is handed over, and a second process
    takes it at once: the lease is ten minutes, the second process gets 30 seconds."""
    model = FakeOpenAI(respond=lambda body: text_message("Findings: launch emails did well."))
    model.hold = asyncio.Event()
    await model.start()
    try:
        first = world.process(FLOTILLA_SHUTDOWN_GRACE_SECONDS="0.5", **LONG_LEASE)
        await first.start()
        team = (await first.started())["team"]
        db = Database(world.database_url)
        async with db.write() as conn:
            await update_agent(
                conn,
                team,
                "researcher",
                datetime.now(UTC),
                model=f"openai-chat:gpt-test@{model.base_url}",
            )
        await db.dispose()

        root = world.driver.mention("maya", "launch", world.app, SUMMARY_REQUEST)
        await asyncio.wait_for(model.received.wait(), 60)  # the researcher's step is running
        assert await first.terminate(signal.SIGTERM) == 0
        handed = [m for m in messages(first) if m.startswith("handed over")]
        assert handed, "\n".join(first.raw[-20:])

        model.received.clear()
        model.hold.set()
        second = world.process(**LONG_LEASE)
        await second.start()
        await second.started()
        await asyncio.wait_for(model.received.wait(), 30)  # taken over at once, not after 600 s
        await world.driver.thread_has_message("launch", root.ts, containing="Findings:")
        assert await second.terminate() == 0
    finally:
        model.hold.set()  # a request still held would keep the fake server from closing
        await model.close()


async def test_a_model_that_cannot_work_refuses_to_start(world: World) -> None:
    flotilla = world.process(FLOTILLA_MODEL="gpt-4o")  # no provider, no key
    await flotilla.start()
    assert await flotilla.wait() == 6
    said = "\n".join(flotilla.raw)
    assert "flotilla: cannot start: the model does not work: model 'gpt-4o' is not valid" in said
    assert "--allow-model-errors" in said and "Traceback" not in said
    assert not [m for m in messages(flotilla) if m.startswith("Flotilla started")]


async def test_a_wrong_model_key_starts_with_a_loud_error_when_allowed(world: World) -> None:
    model = FakeOpenAI(api_keys={"sk-the-right-one"})
    await model.start()
    try:
        flotilla = world.process(
            FLOTILLA_MODEL="openai-chat:gpt-test",
            OPENAI_BASE_URL=model.base_url,
            OPENAI_API_KEY="sk-a-wrong-one",
            FLOTILLA_ALLOW_MODEL_ERRORS="true",
        )
        await flotilla.start()
        error = await flotilla.line(lambda line: line["level"] == "ERROR")
        assert "the model does not work" in error["message"]
        assert "HTTP 401" in error["message"] and "OPENAI_API_KEY" in error["message"]
        assert "sk-a-wrong-one" not in error["message"]
        await flotilla.started()  # it serves anyway, as allowed: Slack and the database are fine

        # a person reads one short sentence; the operator's log has the details
        root = world.driver.mention("maya", "launch", world.app, SUMMARY_REQUEST)
        said = await world.driver.thread_has_message(
            "launch", root.ts, containing="can't reach my model"
        )
        assert "401" not in said.text and "OPENAI_API_KEY" not in said.text
        assert "Agent(" not in world.driver.transcript("launch", root.ts)
        logged = await flotilla.line(
            lambda line: line["level"] in ("WARNING", "ERROR") and line.get("thread") == root.ts
        )
        assert "HTTP 401" in logged["message"] and logged["team"] and logged["channel"]
        assert await flotilla.terminate() == 0
    finally:
        await model.close()


async def test_a_stop_while_starting_ends_cleanly(world: World) -> None:
    flotilla = world.process()
    await flotilla.start()
    await flotilla.line(lambda line: str(line["message"]).startswith("starting:"))
    assert await flotilla.terminate() == 0  # most likely while the modules still load
    assert messages(flotilla)[-1] in ("stopped before the service started", "stopped")
    assert not [raw for raw in flotilla.raw if "Traceback" in raw]
