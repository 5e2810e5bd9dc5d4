"""A throw-away PostgreSQL server for the chaos suite: its own data directory in a temporary
folder, its own free port on 127.0.0.1, stopped and started at will. It is never the
machine's shared server (5432), which the suite does not touch."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import tempfile
from pathlib import Path

from tests.e2e.flotilla_process import free_port

BIN = Path(os.environ.get("FLOTILLA_CHAOS_PG_BIN", "/usr/lib/postgresql/15/bin"))


class ThrowawayPostgres:
    """initdb + pg_ctl in a temporary directory; `url` is Flotilla's database URL for it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="flotilla-chaos-pg-"))
        self.data = self.folder / "data"
        self.log = self.folder / "server.log"
        self.running = False
        # PostgreSQL refuses to run as root: run its tools as the postgres user then
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]
            entry = pwd.getpwnam("postgres")
            os.chown(self.folder, entry.pw_uid, entry.pw_gid)

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    async def _run(self, *args: str) -> None:
        process = await asyncio.create_subprocess_exec(
            *self._as, *args,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {err.decode(errors='replace')[-500:]}")

    async def create(self) -> None:
        await self._run(
            str(BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "--no-sync", "-E", "UTF8",
        )  # fmt: skip
        await self.start()

    async def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c max_connections=200"
        )
        await self._run(
            str(BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
            "-w", "start",
        )  # fmt: skip
        self.running = True

    async def stop(self, mode: str = "fast") -> None:
        """Stop the server (`fast`: connections cut, `immediate`: as if it crashed)."""
        await self._run(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")
        self.running = False

    async def destroy(self) -> None:
        if self.running:
            await self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)
