"""The PostgreSQL server the PostgreSQL tests share, and a database of each pytest process's
own on it.

The server is the one `FLOTILLA_TEST_POSTGRES_URL` names. Without it, a throw-away server
(`tests/throwaway_postgres.py`, from the installed binaries) is started the first time a
test asks for PostgreSQL, shared by every xdist worker of the run and removed at its end.
Without either the tests skip, saying how to get one – in CI (`CI` set) they fail.

Each pytest process (the only one, or each xdist worker) creates a database of its own on
that server when it first needs one and drops it at the end, so parallel workers share
nothing database-wide (advisory locks are per database); each test still works in a schema
of its own there (`tests/conftest.py`). The database's name carries this host and the
process id: one left by a killed run of this host is dropped by the next run that creates
one.

The hooks in `tests/conftest.py` call `configure`, `configure_worker`, `finish_process` and
`unconfigure`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import hashlib
import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine

from tests.throwaway_postgres import (
    INSTALL_HINT,
    ThrowawayPostgres,
    postgres_binaries,
    remove_server,
    unavailable,
)

POSTGRES_URL_ENV = "FLOTILLA_TEST_POSTGRES_URL"
FOLDER_KEY = "flotilla_postgres_folder"  # the throw-away server's folder, in xdist's workerinput
MAX_CONNECTIONS = 300  # every worker's pools, and the tests that start several processes
HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]  # in database names
DATABASE_PREFIX = f"flotilla_test_{HOST}_"  # then the process id, the worker, a random part
NO_POSTGRES = (
    f"PostgreSQL tests need {POSTGRES_URL_ENV} (e.g. postgresql+asyncpg://postgres@127.0.0.1"
    f":5432/test) or PostgreSQL's server binaries for a throw-away server ({INSTALL_HINT})"
)


class SharedPostgres:
    """One pytest process's view: where a throw-away server lives (`folder`, None when the
    URL names a server), and the database this process created, if it did."""

    def __init__(self, folder: Path | None, process: str, *, owns_folder: bool) -> None:
        self.folder = folder
        self.process = process
        self.owns_folder = owns_folder  # the process that removes the throw-away server
        self.database: tuple[str, str] | None = None  # (server URL, database name)
        self.broken: str | None = None  # why the server could not be used, said once

    def server_url(self) -> str:
        url = os.environ.get(POSTGRES_URL_ENV)
        if url:
            return url
        if self.folder is None or postgres_binaries() is None:
            unavailable(NO_POSTGRES)
        return _throwaway_url(self.folder)

    def database_url(self) -> str:
        if self.broken:
            pytest.fail(self.broken)
        if self.database is None:
            base = self.server_url()
            name = f"{DATABASE_PREFIX}{os.getpid()}_{self.process}_{uuid.uuid4().hex[:6]}"
            with contextlib.suppress(OSError, SQLAlchemyError):  # tidying, at best
                _run(_drop_left_over(base))
            try:
                _run(_execute(base, f'CREATE DATABASE "{name}"'))
            except (OSError, SQLAlchemyError) as exc:
                self.broken = f"PostgreSQL at {_shown(base)} cannot be used: {exc}"
                pytest.fail(self.broken)
            self.database = (base, name)
        base, name = self.database
        return make_url(base).set(database=name).render_as_string(hide_password=False)

    def drop_database(self) -> None:
        if self.database is None:
            return
        base, name = self.database
        self.database = None
        _run(_execute(base, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


_shared: SharedPostgres | None = None


def configure(config: pytest.Config) -> None:
    """Every pytest process: an xdist worker takes the run's folder from the controller; the
    controller (or a run without workers) makes it when no URL is given."""
    global _shared
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        folder = workerinput.get(FOLDER_KEY)
        _shared = SharedPostgres(
            Path(folder) if folder else None, str(workerinput["workerid"]), owns_folder=False
        )
        return
    folder_path = None
    if not os.environ.get(POSTGRES_URL_ENV):
        folder_path = Path(tempfile.mkdtemp(prefix="flotilla-test-pg-"))
        folder_path.chmod(0o711)  # the server may run as the postgres user (see throwaway_postgres)
    _shared = SharedPostgres(folder_path, "main", owns_folder=True)


def configure_worker(workerinput: dict[str, Any]) -> None:
    """In the controller, for each xdist worker it starts: the run's folder."""
    if _shared is not None and _shared.folder is not None:
        workerinput[FOLDER_KEY] = str(_shared.folder)


def database_url() -> str:
    """The URL of this process's own database on the shared server (created on first use)."""
    if _shared is None:  # imported outside a pytest run that loaded tests/conftest.py
        raise RuntimeError("tests.shared_postgres is configured by tests/conftest.py")
    return _shared.database_url()


def finish_process() -> None:
    """At the end of each process's session: its database dropped."""
    if _shared is not None:
        _shared.drop_database()


def unconfigure() -> None:
    """At the very end, in the controller: the throw-away server (if one started) removed."""
    if _shared is not None and _shared.owns_folder and _shared.folder is not None:
        remove_server(_shared.folder / "server")
        shutil.rmtree(_shared.folder, ignore_errors=True)


def _throwaway_url(folder: Path) -> str:
    """The throw-away server's URL, started by whichever process asks first (a file lock
    keeps the others waiting until it is up)."""
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        url, failed = folder / "url", folder / "failed"
        if failed.exists():
            pytest.fail(failed.read_text())
        if not url.exists():
            try:
                server = ThrowawayPostgres(max_connections=MAX_CONNECTIONS, root=folder / "server")
                server.start_now()
            except Exception as exc:  # said once here, and to every test after this one
                failed.write_text(f"the throw-away PostgreSQL server did not start: {exc}")
                raise
            url.write_text(server.url)
        return url.read_text()


async def _execute(url: str, statement: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")  # CREATE DATABASE needs it
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


async def _drop_left_over(url: str) -> None:
    """Drop the databases of this host's pytest processes that are gone (killed runs)."""
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            names = (
                await conn.scalars(
                    text("SELECT datname FROM pg_database WHERE starts_with(datname, :prefix)"),
                    {"prefix": DATABASE_PREFIX},
                )
            ).all()
            for name in names:
                pid = name.removeprefix(DATABASE_PREFIX).split("_", 1)[0]
                if pid.isdigit() and not _alive(int(pid)):
                    await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await engine.dispose()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _run(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` to its end from sync code, whether or not an event loop runs here (a
    fixture of an async test calls it on the test's loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, work).result()


def _shown(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)
