"""A throw-away PostgreSQL server of the test's own (initdb and pg_ctl in a temp dir, on a
free loopback port) that a test may stop and start: never the machine's shared server.

Skipped when PostgreSQL's binaries are missing. PostgreSQL refuses to run as root: then the
server runs as the `postgres` system user (through `runuser`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

BIN_DIRS = [Path(p) for p in ("/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin")]


def _bin_dir() -> Path | None:
    for candidate in BIN_DIRS:
        if (candidate / "initdb").exists():
            return candidate
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayPostgres:
    """One server: `start()`, `stop()` (fast shutdown: connections are cut; `immediate`: as if
    it crashed), `remove()`. The chaos suite (`bench/chaos/`) uses it too."""

    def __init__(self, *, max_connections: int = 100) -> None:
        self.max_connections = max_connections
        self.running = False
        bin_dir = _bin_dir()
        if bin_dir is None:
            pytest.skip("PostgreSQL's initdb is not installed")
        self.bin = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="flotilla-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb and postgres refuse root
            self.as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self.as_user, str(self.bin / tool), *args],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.root,
        )

    @property
    def log(self) -> Path:
        return self.root / "log"

    async def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c max_connections={self.max_connections}"
        )
        await asyncio.to_thread(
            self._run,
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-l",
            str(self.log),
            "start",
        )
        self.running = True

    async def stop(self, mode: str = "fast") -> None:
        await asyncio.to_thread(self._run, "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")
        self.running = False

    def remove(self) -> None:
        subprocess.run(
            [
                *self.as_user,
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-m",
                "immediate",
                "stop",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        shutil.rmtree(self.root, ignore_errors=True)
