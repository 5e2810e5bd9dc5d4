"""Benchmark: how long a step waits after `kill -9` of the process running it.

Two `flotilla run` processes (HTTP mode, configured by the environment as an operator
would) share one SQLite file and the local Slack workspace, all on 127.0.0.1. The
researcher's model is a fake OpenAI server that holds every request until told, so its
step is always mid-run when the process whose lease holds it (its granted run request) is
killed with SIGKILL, at a random moment within one heartbeat of the step's start. The
clock runs from the kill until the other process holds the step's run lease (it claimed
the outbox row and the lease in one pass: the takeover, polled every 50 ms), until its
first model request for the step (the run resumed from its stored history; a process's
first request to a provider also loads the provider's SDK) and until the researcher's
answer is in the thread. A new process replaces the killed one before the next round.

Measured with the default lease (30 s, heartbeat 5 s) and a short one (5 s, heartbeat
1 s). The figures are the real time-to-resume, not a test: nothing is asserted.

Usage: .venv/bin/python bench/resume.py [--rounds N] [--short-rounds N] [--quick]
       [--postgres postgresql+asyncpg://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import make_url, select, text
from sqlalchemy.ext.asyncio import create_async_engine

from flotilla.bot.manifest import commander_manifest
from flotilla.local_slack import Driver, InstalledApp, LocalWorkspace
from flotilla.storage.agents import update_agent
from flotilla.storage.db import Database

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's test helpers
from bench.chaos.stack import lease_owners  # noqa: E402
from tests.e2e.flotilla_process import FlotillaProcess  # noqa: E402
from tests.fakes.openai_server import FakeOpenAI, text_message  # noqa: E402

REQUEST = "research our launch emails and write a short report"
ANSWER = "Findings: launch emails did well."
POLL = 0.05  # seconds between looks at the run lease (loopback, a SQLite read)


@dataclass(frozen=True)
class Lease:
    lease: float
    heartbeat: float


@dataclass
class Figures:
    lease: Lease
    taken: list[float] = field(default_factory=list)  # kill -> another holds the run lease
    resumed: list[float] = field(default_factory=list)  # kill -> the step's model called
    answered: list[float] = field(default_factory=list)  # kill -> the answer in the thread


class Bench:
    def __init__(
        self, folder: Path, workspace: LocalWorkspace, model: FakeOpenAI, database_url: str
    ) -> None:
        self.folder = folder
        self.workspace = workspace
        self.model = model
        self.app: InstalledApp = workspace.install_manifest(commander_manifest(), socket_mode=False)
        maya = workspace.add_person("maya")
        workspace.create_channel("launch", [maya, self.app])
        self.driver = Driver(workspace, default_timeout=120.0)
        self.database_url = database_url or f"sqlite+aiosqlite:///{folder / 'flotilla.db'}"
        self.db = Database(self.database_url)
        self.processes: list[FlotillaProcess] = []
        self.researcher_on_fake = False

    async def start_process(self, lease: Lease) -> FlotillaProcess:
        process = FlotillaProcess(
            self.workspace,
            self.app,
            self.database_url,
            self.folder,
            FLOTILLA_RUN_LEASE_SECONDS=str(lease.lease),
            FLOTILLA_HEARTBEAT_SECONDS=str(lease.heartbeat),
        )
        self.processes.append(process)
        await process.start()
        await process.started()
        if not self.researcher_on_fake:  # the first process made the workspace and agents
            await self.researcher_uses_the_fake(await self.team())
        return process

    async def team(self) -> str:
        from flotilla.storage.tables import Workspace

        async with self.db.read() as conn:
            return str(await conn.scalar(select(Workspace.__table__.c.team_id)))

    async def researcher_uses_the_fake(self, team: str) -> None:
        async with self.db.write() as conn:
            await update_agent(
                conn,
                team,
                "researcher",
                datetime.now(UTC),
                model=f"openai-chat:gpt-test@{self.model.base_url}",
            )
        self.researcher_on_fake = True

    async def step_owner(self, timeout: float, *, other_than: str = "") -> str:
        """The owner of the run lease of the step in flight (a step key, not a turn);
        with `other_than`, once another process holds it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            async with self.db.read() as conn:
                rows = await lease_owners(conn)  # a step run's lease is its granted request
            owners = [o for k, o in rows.items() if ":step:" in k and o != other_than]
            if owners:
                return str(owners[0])
            await asyncio.sleep(POLL)
        raise TimeoutError("no process holds the step's lease")

    def process_of(self, owner: str) -> FlotillaProcess:
        pid = int(owner.rsplit(":", 2)[1])  # "host:pid:nonce"
        for process in self.processes:
            if process.process is not None and process.process.pid == pid:
                return process
        raise LookupError(f"no process with pid {pid}")

    async def round(self, lease: Lease, figures: Figures, rng: random.Random) -> None:
        self.model.hold = asyncio.Event()
        self.model.received.clear()
        root = self.driver.mention("maya", "launch", self.app, REQUEST)
        await asyncio.wait_for(self.model.received.wait(), 120)  # the step is running
        victim = self.process_of(await self.step_owner(30))
        await asyncio.sleep(rng.uniform(0, lease.heartbeat))  # anywhere between two beats
        self.model.received.clear()
        dead = await self.step_owner(30)
        killed = time.monotonic()
        await victim.kill()  # SIGKILL: nothing is released or handed over
        await self.step_owner(4 * lease.lease + 60, other_than=dead)
        figures.taken.append(time.monotonic() - killed)
        await asyncio.wait_for(self.model.received.wait(), 4 * lease.lease + 60)
        figures.resumed.append(time.monotonic() - killed)
        self.model.hold.set()
        await self.driver.thread_has_message("launch", root.ts, containing=ANSWER)
        figures.answered.append(time.monotonic() - killed)
        # the plan goes on (writer, synthesis) while a new process replaces the killed one
        self.processes.remove(victim)
        await self.start_process(lease)
        await self.driver.thread_has_message("launch", root.ts, containing="commander:")

    async def measure(self, lease: Lease, rounds: int, rng: random.Random) -> Figures:
        figures = Figures(lease)
        for process in list(self.processes):
            await process.kill()
        self.processes.clear()
        for _ in range(2):
            await self.start_process(lease)
        for number in range(1, rounds + 1):
            await self.round(lease, figures, rng)
            print(
                f"  lease {lease.lease:g} s / heartbeat {lease.heartbeat:g} s, round {number}: "
                f"lease taken {figures.taken[-1]:.2f} s, model called {figures.resumed[-1]:.2f} s, "
                f"answer posted {figures.answered[-1]:.2f} s",
                flush=True,
            )
        return figures

    async def close(self) -> None:
        for process in self.processes:
            await process.kill()
        await self.db.dispose()


def report(all_figures: list[Figures]) -> None:
    print()
    print("| lease / heartbeat | kills | kill -> run lease taken over (each, s) | median | max |")
    print("|---|---|---|---|---|")
    for f in all_figures:
        each = ", ".join(f"{s:.1f}" for s in f.taken)
        print(
            f"| {f.lease.lease:g} s / {f.lease.heartbeat:g} s | {len(f.taken)} | {each} | "
            f"{statistics.median(f.taken):.1f} s | {max(f.taken):.1f} s |"
        )
    print()
    print("| lease / heartbeat | kill -> model called again: median, max | -> answer posted |")
    print("|---|---|---|")
    for f in all_figures:
        print(
            f"| {f.lease.lease:g} s / {f.lease.heartbeat:g} s | "
            f"{statistics.median(f.resumed):.1f} s, {max(f.resumed):.1f} s | "
            f"{statistics.median(f.answered):.1f} s, {max(f.answered):.1f} s |"
        )


class PostgresRole:
    """A throw-away role whose own schema is its search path: `flotilla run` is configured
    by a URL only, so the schema comes with the user name. Dropped afterwards."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.name = f"bench_resume_{uuid.uuid4().hex[:8]}"
        self.url = make_url(base_url).set(username=self.name, password=None)

    async def _run(self, *statements: str) -> None:
        engine = create_async_engine(self.base_url)
        async with engine.begin() as conn:
            for statement in statements:
                await conn.execute(text(statement))
        await engine.dispose()

    async def create(self) -> str:
        await self._run(
            f'CREATE ROLE "{self.name}" LOGIN',
            f'CREATE SCHEMA "{self.name}" AUTHORIZATION "{self.name}"',
            f'ALTER ROLE "{self.name}" SET search_path = "{self.name}"',
        )
        return self.url.render_as_string(hide_password=False)

    async def drop(self) -> None:
        await self._run(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE', f'DROP ROLE "{self.name}"')


async def main(rounds: int, short_rounds: int, postgres: str | None) -> None:
    model = FakeOpenAI(respond=lambda body: text_message(ANSWER))
    await model.start()
    workspace = LocalWorkspace()
    await workspace.start("127.0.0.1", 0)
    role = PostgresRole(postgres) if postgres else None
    database_url = await role.create() if role else ""
    rng = random.Random(10)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        bench = Bench(Path(tmp), workspace, model, database_url)
        try:
            for lease, count in ((Lease(30, 5), rounds), (Lease(5, 1), short_rounds)):
                if count:
                    results.append(await bench.measure(lease, count, rng))
        finally:
            if model.hold is not None:
                model.hold.set()  # a held request would keep the fake server from closing
            await bench.close()
            await workspace.stop()
            await model.close()
            if role is not None:
                await role.drop()
    print(f"\ndatabase: {'PostgreSQL (own schema)' if role else 'SQLite file'}")
    report(results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="kills with the default lease")
    parser.add_argument("--short-rounds", type=int, default=5, help="kills with the short lease")
    parser.add_argument("--quick", action="store_true", help="1 default and 2 short rounds")
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="e.g. postgresql+asyncpg://postgres@127.0.0.1:5432/test (a throw-away role and "
        "schema in it); default: a SQLite file",
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.short_rounds = 1, 2
    asyncio.run(main(args.rounds, args.short_rounds, args.postgres))
