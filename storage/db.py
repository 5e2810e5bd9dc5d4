"""Engines and transactions for the two supported backends.

SQLite (the embedded default) runs in WAL mode with a busy timeout and foreign keys on,
and every write transaction starts with `BEGIN IMMEDIATE`: a plain `BEGIN` that reads
and then writes cannot upgrade its read lock and fails with SQLITE_BUSY at once, ignoring
the busy timeout. PostgreSQL (several replicas) is reached through asyncpg.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

SQLITE_BUSY_TIMEOUT_MS = 30_000
# a pooled PostgreSQL connection idle at least this long is pinged before it is handed out
PING_AFTER_IDLE_SECONDS = 1.0
_IDLE_SINCE = "flotilla_idle_since"
# execution option marking a read-only unit of work, so SQLite can use a deferred BEGIN
READ_ONLY = "flotilla_read_only"
# a caller's further reads or writes, made in a transaction someone else opened
Also = Callable[[AsyncConnection], Awaitable[None]]


# PostgreSQL connections a process keeps open, and how many more it may open for a burst
POOL_SIZE = 12
POOL_OVERFLOW = 8


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


class RollbackOnClose(sqlite3.Connection):
    """A SQLite connection that rolls its open transaction back as it closes.

    Python's `close` (`sqlite3_close_v2`) leaves a connection whose statement is still
    active open, a "zombie", until that statement is finalized – with its transaction, so
    with SQLite's one write lock. That is what a unit of work cancelled mid-statement left
    behind (a job stopped by a plan's cancel or the process's stop): SQLAlchemy then closes
    the connection without a rollback, and the statement's cursor lives on in the
    cancelled task's traceback. Every later write of the process waited for the busy
    timeout and failed, "database is locked", until that cursor was collected."""

    def close(self) -> None:
        if self.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.rollback()
        super().close()


def sqlite_connect_args(kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` for an engine on SQLite: its connections `RollbackOnClose`, each keeping up
    to 256 prepared statements (the stdlib driver's default is 128; the multi-row statements
    of `storage/prepared.py` take one for each row count they see)."""
    driver = {"factory": RollbackOnClose, "cached_statements": 256}
    return kwargs | {"connect_args": driver | kwargs.get("connect_args", {})}


def create_engine(url: str, *, echo: bool = False, **kwargs: Any) -> AsyncEngine:
    """An async engine for `url`, configured for Flotilla's locking rules on its backend."""
    if not is_sqlite(url):
        # kept open: a process runs up to 8 steps at once (the scheduler's per-process
        # capacity) beside its outbox, admission and Slack's requests; SQLAlchemy's default
        # of 5 closed and reopened a connection for nearly every transaction above that
        kwargs.setdefault("pool_size", POOL_SIZE)
        kwargs.setdefault("max_overflow", POOL_OVERFLOW)
        engine = create_async_engine(url, echo=echo, **kwargs)
        _ping_when_idle(engine)
        return engine
    engine = create_async_engine(url, echo=echo, **sqlite_connect_args(kwargs))
    _configure_sqlite(engine)
    return engine


def _ping_when_idle(engine: AsyncEngine) -> None:
    """Ping a pooled connection before use only when it sat idle ≥ 1 s.

    `pool_pre_ping` pings on every checkout (through asyncpg outside a transaction that is
    BEGIN, a query and ROLLBACK: three round trips before a reconcile's two). A connection
    used a moment ago is alive as far as a ping could tell; one that sat in the pool may
    have been cut (a server restart, a proxy's idle timeout), and is replaced by a fresh one
    when the ping fails (the pool's `DisconnectionError` protocol).
    """

    def checkin(_dbapi: Any, record: ConnectionPoolEntry) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    def checkout(dbapi: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        since = record.info.get(_IDLE_SINCE)
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_SECONDS:
            return  # new, or in use a moment ago
        try:
            dbapi.ping()
        except Exception as exc:
            raise DisconnectionError(f"pooled connection failed its ping: {exc}") from exc

    event.listen(engine.sync_engine, "checkin", checkin)
    event.listen(engine.sync_engine, "checkout", checkout)


def mark_idle_since(info: dict[Any, Any], since: float) -> None:
    """Record in a pooled connection's `info` that it has been idle since `since`
    (`time.monotonic()`), e.g. while held outside the pool: its next checkout pings it
    when that was ≥ `PING_AFTER_IDLE_SECONDS` ago."""
    info[_IDLE_SINCE] = since


def prepare_sqlite_connection(dbapi_connection: Any) -> None:
    """Flotilla's SQLite settings on a new DBAPI connection (sync or aiosqlite)."""
    # Take transaction control away from the driver; the `begin` hooks issue BEGIN.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode = WAL")
    # NORMAL is crash-safe in WAL mode (a power loss may drop the last commits only).
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def begin_sqlite(conn: Connection) -> None:
    """BEGIN IMMEDIATE for writes (a deferred BEGIN cannot upgrade its read lock)."""
    read_only = conn.get_execution_options().get(READ_ONLY, False)
    conn.exec_driver_sql("BEGIN DEFERRED" if read_only else "BEGIN IMMEDIATE")


def _configure_sqlite(engine: AsyncEngine) -> None:
    event.listen(
        engine.sync_engine, "connect", lambda dbapi, _record: prepare_sqlite_connection(dbapi)
    )
    event.listen(engine.sync_engine, "begin", begin_sqlite)


class Database:
    """The engine plus the two kinds of unit of work the code needs."""

    def __init__(self, url: str, *, echo: bool = False, **engine_kwargs: Any) -> None:
        self.url = url
        self.is_sqlite = is_sqlite(url)  # asked on every reconcile: answered once
        # What the code above storage/ may depend on, instead of the dialect: SQLite runs
        # write transactions one at a time (`begin_sqlite` takes the write lock at BEGIN),
        # so writes that belong together can share one transaction without a version check
        # (a reconcile under its lock, a job's settle in its outcome's reconcile, a tool's
        # write storing the run's response); PostgreSQL runs them side by side (a reconcile
        # is an optimistic read and one version-checked write).
        self.writes_one_at_a_time = self.is_sqlite
        self.engine = create_engine(url, echo=echo, **engine_kwargs)
        self._disposers: list[Callable[[], None]] = []

    def on_dispose(self, disposer: Callable[[], None]) -> None:
        """Call `disposer` when this database is disposed (e.g. a worker engine's)."""
        self._disposers.append(disposer)

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction: committed on success, rolled back on error.

        On SQLite it holds the database's single write lock from its first statement,
        which is what makes it the per-conversation lock there.
        """
        async with self.engine.begin() as conn:
            yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        """A read-only transaction (deferred on SQLite, so readers never queue behind writers)."""
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(**{READ_ONLY: True})
            async with conn.begin():
                yield conn

    async def dispose(self) -> None:
        for disposer in self._disposers:
            disposer()
        await self.engine.dispose()
