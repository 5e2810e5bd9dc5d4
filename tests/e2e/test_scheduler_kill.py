"""Real `flotilla run` processes share one database – two on a SQLite file, three on
PostgreSQL; the one holding the researcher's granted run is killed with SIGKILL mid-run;
another takes the run over once its lease ended (its grant, the run's lease, expired and
is granted anew) and the step runs to its answer once: never twice, nothing lost.

`tests/integration/test_scheduler_processes.py` does the same with three services in one
OS process and `Executor.abandon()` as the kill; here the kill is a real one.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import make_url, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from flotilla.bot.manifest import commander_manifest
from flotilla.local_slack import Driver, InstalledApp, LocalWorkspace
from flotilla.storage.agents import update_agent
from flotilla.storage.db import Database
from flotilla.storage.records import RunRequestRecord
from flotilla.storage.run_requests import get_request, queued_requests
from flotilla.storage.tables import Workspace
from tests.conftest import BACKENDS, postgres_url
from tests.e2e.flotilla_process import FlotillaProcess
from tests.eventually import eventually
from tests.fakes.openai_server import CLIENT_GONE, FakeOpenAI, text_message

REQUEST = "research our launch emails and write a short report"
FINDINGS = "Findings: launch emails did well."
WAIT = 60.0  # seconds: a bound on a hung step, never a sleep
# a short lease, so the survivor takes the run over within seconds of the kill – but five
# heartbeats long, so that a holder slowed down by a busy machine keeps it until the kill
SHORT_LEASE = {
    "FLOTILLA_RUN_LEASE_SECONDS": "5",
    "FLOTILLA_HEARTBEAT_SECONDS": "1",
    "FLOTILLA_SCHEDULER_POLL_SECONDS": "0.5",
}
# real processes started and killed: one test at a time with tests/e2e/test_run_process.py
pytestmark = pytest.mark.xdist_group("processes")


class World:
    def __init__(self, workspace: LocalWorkspace, folder: Path, database_url: str) -> None:
        self.workspace = workspace
        self.folder = folder
        self.app: InstalledApp = workspace.install_manifest(commander_manifest(), socket_mode=False)
        maya = workspace.add_person("maya")
        workspace.create_channel("launch", [maya, self.app])
        self.driver = Driver(workspace, default_timeout=WAIT)
        self.database_url = database_url
        self.db = Database(self.database_url)
        self.processes: list[FlotillaProcess] = []

    async def process(self) -> FlotillaProcess:
        process = FlotillaProcess(
            self.workspace, self.app, self.database_url, self.folder, **SHORT_LEASE
        )
        self.processes.append(process)
        await process.start()
        await process.started()
        return process

    def process_of(self, owner: str) -> FlotillaProcess:
        pid = int(owner.rsplit(":", 2)[1])  # "host:pid:nonce"
        return next(p for p in self.processes if p.process and p.process.pid == pid)

    async def researcher_granted(self) -> RunRequestRecord:
        async def granted() -> list[RunRequestRecord]:
            async with self.db.read() as conn:
                queue = await queued_requests(conn)
            return [r for r in queue if r.agent_name == "researcher" and r.state == "granted"]

        return (await eventually(granted, WAIT, what="the researcher's run granted"))[0]


@asynccontextmanager
async def throwaway_database(base_url: str) -> AsyncIterator[str]:
    """A database of its own on the test PostgreSQL server (child processes connect to it
    by URL alone), dropped afterwards."""
    name = f"flotilla_kill_{uuid.uuid4().hex[:10]}"
    admin = create_async_engine(base_url, isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(base_url).set(database=name).render_as_string(hide_password=False)
    finally:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        await admin.dispose()


@pytest.fixture(params=BACKENDS)
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    workspace = LocalWorkspace()
    await workspace.start("127.0.0.1", 0)
    async with contextlib.AsyncExitStack() as stack:
        url = f"sqlite+aiosqlite:///{tmp_path / 'flotilla.db'}"
        if request.param == "postgres":
            url = await stack.enter_async_context(throwaway_database(postgres_url()))
        world = World(workspace, tmp_path, url)
        try:
            yield world
        finally:
            for process in world.processes:
                await process.kill()
            await world.db.dispose()
            await workspace.stop()


async def test_a_sigkilled_holder_run_is_taken_over_by_another_process_once(
    world: World,
) -> None:
    model = FakeOpenAI(respond=lambda body: text_message(FINDINGS))
    model.hold = asyncio.Event()  # the researcher's requests wait until the test says so
    await model.start()
    try:
        first = await world.process()
        replicas = 3 if world.database_url.startswith("postgresql") else 2
        for _ in range(replicas - 1):  # the other replicas, on the same database
            await world.process()
        async with world.db.write() as conn:
            team = str(await conn.scalar(select(Workspace.__table__.c.team_id)))
            await update_agent(
                conn,
                team,
                "researcher",
                datetime.now(UTC),
                model=f"openai-chat:gpt-test@{model.base_url}",
            )
        assert first.process is not None

        root = world.driver.mention("maya", "launch", world.app, REQUEST)
        await asyncio.wait_for(model.received.wait(), WAIT)  # the researcher's run is mid-run
        run = await world.researcher_granted()
        assert run.holder is not None and run.grants == 1
        victim = world.process_of(run.holder)
        await victim.kill()  # SIGKILL: nothing released, nothing handed over
        model.hold.set()  # from now on the model answers (the dead process hears nothing)

        await world.driver.thread_has_message("launch", root.ts, containing=FINDINGS)
        async with world.db.read() as conn:
            again = await get_request(conn, run.run_key)
        assert again is not None and again.grants == 2  # granted anew, to the survivor
        texts = [m.text for m in world.driver.thread("launch", root.ts)]
        # answered once (the writer's dispatch, which may be posted by now, quotes it)
        assert sum(t.startswith(FINDINGS) for t in texts) == 1, "\n".join(texts)
        statuses = [r.status for r in model.requests]
        # the dead process's request found nobody to answer; the survivor's was paid once
        assert statuses == [CLIENT_GONE, 200], statuses
    finally:
        model.hold.set()  # a request still held would keep the fake server from closing
        await model.close()
