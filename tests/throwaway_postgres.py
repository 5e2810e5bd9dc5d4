"""A throw-away PostgreSQL server of the test's own (initdb and pg_ctl in a temp dir, on a
free loopback port) that a test may stop and start: never the machine's shared server.

`tests/shared_postgres.py` starts one too, for the whole run, when no
`FLOTILLA_TEST_POSTGRES_URL` is given. Without PostgreSQL's binaries a test that needs one
is skipped, saying how to get them – except in CI (`CI` set), where it fails. PostgreSQL
refuses to run as root: then the server runs as the `postgres` system user (through
`runuser`)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import NoReturn

import pytest

BIN_DIRS = [Path(p) for p in ("/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin")]
INSTALL_HINT = "apt-get install postgresql"


def postgres_binaries() -> Path | None:
    """The folder of PostgreSQL's server binaries (initdb, pg_ctl), if they are installed."""
    for candidate in BIN_DIRS:
        if (candidate / "initdb").exists():
            return candidate
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def unavailable(reason: str) -> NoReturn:
    """Skip a test that needs PostgreSQL, saying `reason`; in CI, fail it instead."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} – CI must run the PostgreSQL tests")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayPostgres:
    """One server: `start()`, `stop()` (fast shutdown: connections are cut; `immediate`: as if
    it crashed), `remove()`. The chaos suite (`bench/chaos/`) uses it too. `root`: the folder
    to keep it in (a new temporary one by default); it is removed with the server."""

    def __init__(self, *, max_connections: int = 100, root: Path | None = None) -> None:
        self.max_connections = max_connections
        self.running = False
        bin_dir = postgres_binaries()
        if bin_dir is None:
            unavailable(
                f"PostgreSQL's server binaries are not installed ({INSTALL_HINT}): these tests "
                "stop and start a server of their own"
            )
        self.bin = bin_dir
        if root is None:
            root = Path(tempfile.mkdtemp(prefix="flotilla-pg-"))
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
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
        done = subprocess.run(
            [*self.as_user, str(self.bin / tool), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.root,
            check=False,
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} {' '.join(args)} failed: {done.stderr.strip()}\n{log}")

    @property
    def log(self) -> Path:
        return self.root / "log"

    def start_now(self) -> None:
        """`start`, for a caller that is not on an event loop."""
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            f"-c max_connections={self.max_connections}"
        )
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-w", "-l", str(self.log), "start")
        self.running = True

    async def start(self) -> None:
        await asyncio.to_thread(self.start_now)

    async def stop(self, mode: str = "fast") -> None:
        await asyncio.to_thread(self._run, "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")
        self.running = False

    def remove(self) -> None:
        remove_server(self.root)


def remove_server(root: Path) -> None:
    """Stop the server kept in `root` at once (if it runs) and remove its folder: for a
    process other than the one that started it."""
    bin_dir = postgres_binaries()
    data = root / "data"
    if bin_dir is not None and data.exists():
        as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(
            [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    shutil.rmtree(root, ignore_errors=True)
