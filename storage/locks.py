"""The per-conversation lock: every state-changing path of one conversation runs under it.

`ConversationLocks.run(db, conversation, work)` runs `work(conn)` – a synchronous
function holding the whole unit of work – in a write transaction that first takes the
conversation's lock, which commit or rollback releases:
- SQLite: the transaction starts with `BEGIN IMMEDIATE`, the database's single write
  lock, which holds across processes (busy timeout for waiting). The transaction runs on
  a worker thread through the stdlib driver, so it costs one thread hop in all instead
  of one per statement (aiosqlite's way; the hop: `storage/worker_threads.py`). An
  `asyncio.Lock` per conversation in front keeps this process's own callers from
  contending for the file lock.
- PostgreSQL: an `UPDATE` of the conversation's row that moves its `lock_version` on (the
  row lock, and a signal to optimistic writers, see `run_optimistic`), or, for a thread
  with no row yet, `pg_advisory_xact_lock(hashtext(key))`. Both are transaction scoped
  (released on commit, rollback or a dropped connection) and work behind pgbouncer's
  transaction pooling. `work` runs through `run_sync` on the async connection.

`run_unit` picks the way for a reconcile: `run` on SQLite, `run_optimistic` on PostgreSQL.
`run_optimistic` is the reconcile's path on PostgreSQL: no lock is taken; `work` – a coroutine
function – runs on a pooled connection's asyncpg connection, awaited directly outside any
transaction (each statement its own transaction: no BEGIN, no COMMIT round trip, no
`run_sync`),
reads the plan with the conversation's `lock_version` and writes everything in one
statement only `WHERE lock_version = :read` (`storage/optimistic.py`); when another writer
moved the version on, `work` raises `VersionConflict` and runs again.
Never hold it across a Slack or model call: decide inside, act after commit.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Executable, create_engine, event, func, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

from flotilla.storage.conversations import bump_lock_version
from flotilla.storage.db import (
    PING_AFTER_IDLE_SECONDS,
    READ_ONLY,
    Database,
    mark_idle_since,
    prepare_sqlite_connection,
    sqlite_connect_args,
)
from flotilla.storage.optimistic import VersionConflict
from flotilla.storage.prepared import DriverConnection
from flotilla.storage.worker_threads import on_worker

T = TypeVar("T")
# PostgreSQL connections kept for optimistic reconciles: a process runs up to 8 steps at once
# (the scheduler's capacity); the pool's other 12 (`storage.db`, 12 + 8) stay for the rest
HELD_FOR_RECONCILES = 8
Work = Callable[[Connection], T]
DriverWork = Callable[[DriverConnection], Awaitable[T]]


class ConversationLocks:
    """Runs units of work under a conversation's lock: one at a time per conversation, the
    others waiting in the order they came (as `asyncio.Lock` serves them)."""

    def __init__(self) -> None:
        # the conversations held now, each with its waiters' turns in arrival order: an entry
        # lives while someone holds the conversation. No lock object nor weak reference is
        # made and dropped per transaction (an `asyncio.Lock` in a weak-valued dictionary
        # was ~10 calls a reconcile)
        self._held: dict[int | str, deque[asyncio.Future[None]]] = {}

    async def _acquire(self, key: int | str) -> None:
        waiters = self._held.get(key)
        if waiters is None:
            self._held[key] = deque()
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters.append(turn)
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self._release(key)  # cancelled as its turn came: the next one's turn
            raise

    def _release(self, key: int | str) -> None:
        waiters = self._held[key]
        while waiters:
            turn = waiters.popleft()
            if not turn.done():  # a cancelled waiter's turn is skipped
                turn.set_result(None)
                return
        del self._held[key]

    async def run(self, db: Database, conversation: int | str, work: Work[T]) -> T:
        """`work(conn)` in a write transaction holding the lock of `conversation`.

        `conversation` is a conversation id, or a string key for a thread that has no
        conversation row yet. Committed when `work` returns, rolled back if it raises.
        """

        def locked(conn: Connection) -> T:
            lock(conn, conversation)
            return work(conn)

        await self._acquire(conversation)
        try:
            if db.is_sqlite:
                return await on_worker(held_connections(db).run, locked)
            async with db.write() as conn:
                return await conn.run_sync(locked)
        finally:
            self._release(conversation)

    async def run_unit(
        self,
        db: Database,
        conversation: int,
        locked: Work[T],
        optimistic: DriverWork[T],
        *,
        ahead: Sequence[Executable] = (),
    ) -> T:
        """One unit of work of a conversation as the database runs it best – the choice
        between the two ways lives here, not with the callers: on SQLite, whose write
        transactions run one at a time, `locked` (`run`), which writes everything the unit
        carries; on PostgreSQL `optimistic` (`run_optimistic`, one version-checked statement),
        after `ahead` – the unit's other writes, which that statement cannot carry – in a
        write transaction of its own."""
        if db.is_sqlite:
            return await self.run(db, conversation, locked)
        if ahead:
            async with db.write() as conn:
                for statement in ahead:
                    await conn.execute(statement)
        return await self.run_optimistic(db, conversation, optimistic)

    async def run_optimistic(
        self, db: Database, conversation: int, work: DriverWork[T], *, max_tries: int = 50
    ) -> T:
        """`await work(conn)` on a pooled PostgreSQL connection's asyncpg connection, outside
        any transaction (`storage.prepared.DriverConnection`), again while it raises
        `VersionConflict` (another writer changed the conversation between its read and
        its version-checked write). After `max_tries` conflicts in a row the conflict is
        raised. The in-process lock in front keeps this process's own callers in line."""
        assert not db.is_sqlite, "SQLite has no optimistic path: use run()"
        await self._acquire(conversation)
        try:
            held = _held_pool_connections(db)
            raw, driver = await held.take()
            for attempt in range(1, max_tries + 1):
                try:
                    result = await work(driver)
                except VersionConflict:
                    if attempt < max_tries:
                        continue
                    held.put_back(raw, driver)
                    raise
                except BaseException:
                    # a closed connection is not put back into the pool (SQLAlchemy's way)
                    closed = driver.driver.is_closed()
                    await greenlet_spawn(raw.invalidate if closed else raw.close)
                    raise
                held.put_back(raw, driver)
                return result
            raise AssertionError("unreachable")
        finally:
            self._release(conversation)


class HeldPoolConnections:
    """The optimistic path's PostgreSQL connections, kept checked out between reconciles.

    A reconcile takes the most recently used one (or checks one out of the pool: the pool's
    connection itself, not a `Connection` around it, whose layers the work does not use – it
    begins no transaction) and puts it back after: no pool checkout and check-in per
    reconcile (about 90 µs of CPU each through SQLAlchemy's pool and events). What the pool
    did at checkout still holds: a connection idle ≥ `PING_AFTER_IDLE_SECONDS` goes back to
    the pool, and the next checkout pings it (`storage.db`); at most `limit` are kept, so
    the rest of the process never waits for a connection held here idle. A connection whose
    work raised is not kept. Nothing is open on a kept one (each statement was its own
    transaction), so the pool's reset on check-in had nothing to do either.
    """

    def __init__(self, db: Database, limit: int = HELD_FOR_RECONCILES) -> None:
        self.db = db
        self.limit = limit
        self.free: list[tuple[PoolProxiedConnection, DriverConnection, float]] = []
        self.closed = False  # the database was disposed: keep none from now on

    async def take(self) -> tuple[PoolProxiedConnection, DriverConnection]:
        now = time.monotonic()
        if self.free and now - self.free[0][2] >= PING_AFTER_IDLE_SECONDS:
            idle = [entry for entry in self.free if now - entry[2] >= PING_AFTER_IDLE_SECONDS]
            self.free = [entry for entry in self.free if now - entry[2] < PING_AFTER_IDLE_SECONDS]
            for raw, _, since in idle:
                info = raw.info  # the pool's record of the connection
                await greenlet_spawn(raw.close)  # back to the pool, idle since it was put back
                mark_idle_since(info, since)  # here: so its next checkout pings it
        if self.free:
            raw, driver, _ = self.free.pop()
            return raw, driver
        raw = await self.db.engine.raw_connection()
        return raw, DriverConnection(self.db.engine.dialect, raw.driver_connection)

    def put_back(self, raw: PoolProxiedConnection, driver: DriverConnection) -> None:
        if len(self.free) < self.limit and not self.closed:
            self.free.append((raw, driver, time.monotonic()))
        else:
            raw.close()  # nothing open on it: the check-in does no I/O

    def close(self) -> None:
        self.closed = True
        while self.free:
            self.free.pop()[0].close()


_held_pool: weakref.WeakKeyDictionary[Database, HeldPoolConnections] = weakref.WeakKeyDictionary()


def _held_pool_connections(db: Database) -> HeldPoolConnections:
    held = _held_pool.get(db)
    if held is None:
        held = _held_pool[db] = HeldPoolConnections(db)
        db.on_dispose(held.close)
    return held


async def run_transaction(db: Database, work: Work[T]) -> T:
    """`work(conn)` in a write transaction on the same one-hop path as the locked units
    (a worker thread on SQLite, `run_sync` on PostgreSQL), without a conversation lock."""
    if db.is_sqlite:
        return await on_worker(held_connections(db).run, work)
    async with db.write() as conn:
        return await conn.run_sync(work)


def lock(conn: Connection, conversation: int | str) -> None:
    """Take the conversation's lock inside the current transaction."""
    if conn.dialect.name != "postgresql":
        return  # SQLite: BEGIN IMMEDIATE already holds the database's write lock
    if isinstance(conversation, str):
        conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(conversation))))
        return
    bump_lock_version(conn, conversation)


class HeldConnections:
    """The worker engine's connections, kept checked out between transactions.

    A transaction takes a free one (or connects), begins on it – the engine's `begin`
    event, so `BEGIN IMMEDIATE` as before, and SQLAlchemy's `begin`/`commit` events and
    SQLite's trace callback see the same transaction – and puts it back after its commit:
    no pool checkout and check-in, no new `Connection`, no reset-on-return `ROLLBACK` per
    transaction. Between transactions a held connection is in autocommit (no transaction
    and no read snapshot open). A connection whose work raised is closed (back to the pool,
    reset) instead of kept. `list.pop`/`append` are atomic: worker threads share the list.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.free: list[Connection] = []

    def run(self, work: Work[T]) -> T:
        try:
            conn = self.free.pop()
        except IndexError:
            conn = self.engine.connect()
        try:
            with conn.begin():
                result = work(conn)
        except BaseException:
            conn.close()
            raise
        self.free.append(conn)
        return result

    def close(self) -> None:
        while self.free:
            self.free.pop().close()


_sqlite_engines: weakref.WeakKeyDictionary[Database, Engine] = weakref.WeakKeyDictionary()
_held: weakref.WeakKeyDictionary[Engine, HeldConnections] = weakref.WeakKeyDictionary()


def sqlite_engine(db: Database) -> Engine:
    """A synchronous engine on `db`'s SQLite file, with the same settings as storage/db.py.
    `db.dispose()` closes its held connections and disposes it."""
    engine = _sqlite_engines.get(db)
    if engine is None:
        engine = create_engine(db.url.replace("+aiosqlite", "", 1), **sqlite_connect_args({}))
        _configure(engine)
        _sqlite_engines[db] = engine
        held = _held[engine] = HeldConnections(engine)
        db.on_dispose(held.close)
        db.on_dispose(engine.dispose)
    return engine


# the last database's held connections: a process has one (two weak-dictionary look-ups,
# each making a weak reference, a transaction otherwise); replaced whole, safe beside threads
_last_held: tuple[weakref.ref[Database], HeldConnections] | None = None


def held_connections(db: Database) -> HeldConnections:
    """The worker engine's held connections on `db`'s SQLite file (`sqlite_engine`)."""
    global _last_held
    last = _last_held
    if last is not None and last[0]() is db:
        return last[1]
    held = _held[sqlite_engine(db)]
    _last_held = (weakref.ref(db), held)
    return held


def _configure(engine: Engine) -> None:
    event.listen(engine, "connect", lambda dbapi, _record: prepare_sqlite_connection(dbapi))
    event.listen(engine, "begin", _begin_on_driver)


def _begin_on_driver(conn: Connection) -> None:
    """`begin_sqlite`'s BEGIN, sent on the stdlib driver's connection itself: the same
    statement without SQLAlchemy's execution layers, once per transaction (see
    storage/prepared.py for why the hot path skips them)."""
    read_only = conn.get_execution_options().get(READ_ONLY, False)
    driver: Any = conn.connection.dbapi_connection  # pysqlite's: the driver's own
    driver.execute("BEGIN DEFERRED" if read_only else "BEGIN IMMEDIATE")
