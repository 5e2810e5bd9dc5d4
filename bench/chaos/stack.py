"""The world an experiment runs in, all on 127.0.0.1: the local Slack workspace, a fake
OpenAI server the sub-agents use (the commander stays on the offline model), and real
`flotilla run` processes configured by the environment, started, killed and restarted.

Every process's log is kept (also of killed ones) for the traceback and secret counts."""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.bot.manifest import commander_manifest
from flotilla.local_slack import Driver, InstalledApp, LocalWorkspace, Message
from flotilla.storage.agents import list_agents, update_agent
from flotilla.storage.db import Database
from flotilla.storage.run_request_leases import holders
from flotilla.storage.runs import leases_t
from tests.e2e.flotilla_process import FlotillaProcess
from tests.fakes.openai_server import FakeOpenAI, text_message

CHANNEL = "chaos"
# Slack retries an unacknowledged event nearly at once, then after 1 min and 5 min; the
# later two are scaled down here (÷3, ÷5) so that an experiment of minutes sees them all.
RETRY_DELAYS = (1.0, 20.0, 60.0)
SHORT_LEASE = {"FLOTILLA_RUN_LEASE_SECONDS": "5", "FLOTILLA_HEARTBEAT_SECONDS": "1"}


def request_text(number: int) -> str:
    """A research-then-write request (the offline commander plans a 3-step chain for it)."""
    return f"research topic {number} of our launch emails and write a short report"


def answer_for(body: dict[str, Any]) -> dict[str, Any]:
    """The fake model's answer: text that names the prompt it answers (unique per step)."""
    digest = hashlib.sha256(json.dumps(body["messages"]).encode()).hexdigest()[:10]
    return text_message(f"Findings {digest}: launch emails did well.")


@dataclass
class Mention:
    number: int
    root: Message
    sent: float  # time.monotonic()


LOG_NAME = "flotilla-processes.log"  # in the stack's folder once it stopped


@dataclass
class Stack:
    folder: Path
    database_url: str
    ack_timeout: float = 3.0
    model_latency: float = 1.0  # each model answer takes this long: kills find steps running
    retry_delays: Sequence[float] = RETRY_DELAYS
    settings: dict[str, str] = field(default_factory=lambda: dict(SHORT_LEASE))
    workspace: LocalWorkspace = field(init=False)
    model: FakeOpenAI = field(init=False)
    app: InstalledApp = field(init=False)
    driver: Driver = field(init=False)
    db: Database = field(init=False)
    model_key: str = field(default_factory=lambda: "sk-chaos-" + secrets.token_hex(16))
    request_url: str | None = None  # a proxy in front of the processes, when set
    processes: list[FlotillaProcess] = field(default_factory=list)  # alive or not
    mentions: list[Mention] = field(default_factory=list)
    agents_on_fake: bool = False
    killed: int = 0
    startups: list[float] = field(default_factory=list)  # seconds from start to serving

    async def start(self) -> None:
        self.model = FakeOpenAI(
            respond=answer_for, api_keys={self.model_key}, latency=self.model_latency
        )
        await self.model.start()
        self.workspace = LocalWorkspace(
            ack_timeout=self.ack_timeout, retry_delays=self.retry_delays
        )
        await self.workspace.start("127.0.0.1", 0)
        self.app = self.workspace.install_manifest(commander_manifest(), socket_mode=False)
        maya = self.workspace.add_person("maya")
        self.workspace.create_channel(CHANNEL, [maya, self.app])
        self.driver = Driver(self.workspace, default_timeout=60.0)
        self.db = Database(self.database_url)

    async def stop(self) -> None:
        for process in self.processes:
            await process.kill()
        # every process's log, kept in the folder for a reader (the tests print its warnings)
        (self.folder / LOG_NAME).write_text("\n".join(self.raw_logs()), encoding="utf-8")
        await self.workspace.stop()
        await self.model.close()
        await self.db.dispose()

    @property
    def secrets(self) -> dict[str, str]:
        """What must never appear in a log."""
        return {
            "bot token": self.app.bot_token,
            "signing secret": self.app.signing_secret,
            "model key": self.model_key,
        }

    def alive(self) -> list[FlotillaProcess]:
        return [p for p in self.processes if p.process is not None and p.process.returncode is None]

    async def spawn(self, *, wait: bool = True, **settings: str) -> FlotillaProcess:
        """Start one more `flotilla run` (and, the first time, point the agents at the fake)."""
        process = FlotillaProcess(
            self.workspace,
            self.app,
            self.database_url,
            self.folder,
            OPENAI_API_KEY=self.model_key,
            **{**self.settings, **settings},
        )
        if self.request_url is not None:
            self.workspace.set_request_url(self.app, f"{self.request_url}/slack/events")
        self.processes.append(process)
        begun = time.monotonic()
        await process.start()
        if wait:
            await process.started()
            self.startups.append(time.monotonic() - begun)
            if not self.agents_on_fake:
                await self.agents_use_the_fake()
        return process

    async def agents_use_the_fake(self) -> None:
        from flotilla.storage.tables import Workspace

        async with self.db.read() as conn:
            team = str(await conn.scalar(select(Workspace.__table__.c.team_id)))
            agents = await list_agents(conn, team)
        async with self.db.write() as conn:
            for agent in agents:
                await update_agent(
                    conn,
                    team,
                    agent.name,
                    datetime.now(UTC),
                    model=f"openai-chat:gpt-test@{self.model.base_url}",
                )
        self.agents_on_fake = True

    def mention(self, number: int | None = None) -> Mention:
        number = len(self.mentions) + 1 if number is None else number
        root = self.driver.mention("maya", CHANNEL, self.app, request_text(number))
        sent = Mention(number, root, time.monotonic())
        self.mentions.append(sent)
        return sent

    async def leases_of(self, process: FlotillaProcess) -> list[str]:
        """The run keys whose lease `process` holds now."""
        assert process.process is not None
        marker = f":{process.process.pid}:"
        async with self.db.read() as conn:
            rows = await lease_owners(conn)
        return [key for key, owner in rows.items() if marker in owner]

    async def taken_over(
        self, keys: list[str], owner_pid: int, since: float, timeout: float
    ) -> float | None:
        """Seconds from `since` until every run in `keys` is held by another process or
        finished (None if not within `timeout`)."""
        marker = f":{owner_pid}:"
        while time.monotonic() - since < timeout:
            try:
                async with self.db.read() as conn:
                    rows = await lease_owners(conn)
            except Exception:  # the database is restarting: look again
                rows = {key: marker for key in keys}
            if all(marker not in str(rows.get(key, "")) for key in keys):
                return time.monotonic() - since
            await asyncio.sleep(0.1)
        return None

    async def kill(self, victim: FlotillaProcess, timeout: float) -> asyncio.Task[float | None]:
        """SIGKILL `victim`; a task that measures the takeover of the runs it held."""
        assert victim.process is not None
        pid = victim.process.pid
        try:  # the steps it was running (not commander turns)
            keys = [key for key in await self.leases_of(victim) if ":step:" in key]
        except Exception:  # the database is down: nothing to measure
            keys = []
        await victim.kill()
        killed = time.monotonic()
        self.killed += 1

        async def measured() -> float | None:
            return await self.taken_over(keys, pid, killed, timeout) if keys else None

        return asyncio.create_task(measured())

    def raw_logs(self) -> list[str]:
        return [line for process in self.processes for line in process.raw]


async def lease_owners(conn: AsyncConnection) -> dict[str, str]:
    """Who holds each run now: a plain run lease, or a granted run request (a step's or a
    commander turn's lease is its slot)."""
    rows = dict((await conn.execute(select(leases_t.c.run_key, leases_t.c.owner))).all())
    owners = {str(key): str(owner) for key, owner in rows.items()}
    return owners | {key: holder for key, (holder, _) in (await holders(conn)).items()}
