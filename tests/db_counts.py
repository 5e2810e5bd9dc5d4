"""Counting what reaches SQLite: transactions and statements, by kind and by call site.

`counting()` patches `sqlite3.connect` while it is active, so every SQLite connection
opened meanwhile – aiosqlite's (the async engine) and the stdlib driver's on a worker
thread (the one-hop path of `storage.locks`, or any raw `sqlite3` connection) – reports
each statement SQLite runs through its trace callback. That is the ground truth: a
transaction is a `BEGIN …` (or a statement run outside one, which SQLite wraps in its
own), a statement anything else but `COMMIT`, `ROLLBACK` and `PRAGMA`.

Each transaction's statement kinds are kept too (`shapes`), so a test can tell which
writes commit together.

With `callers=True` a SQLAlchemy listener also attributes each statement to the nearest
project frames that sent it (through greenlets, so an `await conn.execute(...)` shows
its coroutine), for `bench/slice.py --callers`.

Start counting *before* the engines connect (pooled connections opened earlier are not
seen); `reset()` starts a new window.
"""

from __future__ import annotations

import re
import sqlite3
import sqlite3.dbapi2
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

_TABLE = re.compile(
    r"^\s*(?:SELECT\b.*?\bFROM|INSERT(?:\s+OR\s+\w+)?\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)",
    re.IGNORECASE | re.DOTALL,
)
_PARENTHESES = re.compile(r"\([^()]*\)")
_PROJECT = ("/agents/", "/bot/", "/storage/", "/local_slack/")


def statement_kind(sql: str) -> str:
    """`SELECT agents`, `UPDATE agent_runs`, … – the verb and the first table named."""
    verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else "?"
    outer = sql
    while (inner := _PARENTHESES.sub("", outer)) != outer:  # subqueries name no table here
        outer = inner
    found = _TABLE.match(outer)
    if found is None:
        return verb
    table = found.group(1)
    return f"{verb} {'(subquery)' if table.upper() == 'AS' else table}"


@dataclass
class DbCounts:
    """Transactions by kind (`write`/`read`/`autocommit` × `aiosqlite`/`worker thread`),
    statements by kind (`statement_kind`), transactions by the statement kinds they ran
    (`shapes`) and, if asked, statements by call site."""

    transactions: Counter[str] = field(default_factory=Counter)
    statements: Counter[str] = field(default_factory=Counter)
    shapes: Counter[frozenset[str]] = field(default_factory=Counter)
    callers: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def transaction_total(self) -> int:
        return sum(self.transactions.values())

    @property
    def statement_total(self) -> int:
        return sum(self.statements.values())

    def reset(self) -> None:
        with self._lock:
            self.transactions.clear()
            self.statements.clear()
            self.shapes.clear()
            self.callers.clear()

    def together(self, kind: str) -> list[frozenset[str]]:
        """The statement kinds of every transaction that ran a statement of `kind`."""
        with self._lock:
            return [shape for shape, n in self.shapes.items() if kind in shape for _ in range(n)]

    def _tracer(self, path: str) -> Any:
        in_transaction = False
        kinds: set[str] = set()  # of the transaction open on this connection

        def trace(sql: str) -> None:
            nonlocal in_transaction
            head = sql.lstrip()[:8].upper()
            with self._lock:
                if head.startswith("BEGIN"):
                    in_transaction = True
                    kinds.clear()
                    read = "DEFERRED" in sql.upper()
                    self.transactions[f"{'read' if read else 'write'} ({path})"] += 1
                elif head.startswith(("COMMIT", "ROLLBACK", "END")):
                    in_transaction = False
                    self.shapes[frozenset(kinds)] += 1
                elif not head.startswith("PRAGMA"):
                    kind = statement_kind(sql)
                    if not in_transaction:
                        self.transactions[f"autocommit ({path})"] += 1
                        self.shapes[frozenset({kind})] += 1
                    kinds.add(kind)
                    self.statements[kind] += 1

        return trace


@contextmanager
def counting(*, callers: bool = False) -> Iterator[DbCounts]:
    """Counts every SQLite statement of connections opened inside the block."""
    counts = DbCounts()
    original = sqlite3.connect

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = original(*args, **kwargs)
        conn.set_trace_callback(counts._tracer("aiosqlite" if _in_aiosqlite() else "worker thread"))
        return conn

    def attribute(_conn: Any, _cursor: Any, sql: str, *_rest: Any) -> None:
        if sql.lstrip()[:6].upper() == "PRAGMA":
            return
        with counts._lock:
            counts.callers[f"{statement_kind(sql):<28} {call_site()}"] += 1

    # SQLAlchemy's stdlib dialect calls `sqlite3.dbapi2.connect`, aiosqlite `sqlite3.connect`
    sqlite3.connect = sqlite3.dbapi2.connect = connect  # type: ignore[assignment]
    if callers:
        event.listen(Engine, "before_cursor_execute", attribute)
    try:
        yield counts
    finally:
        sqlite3.connect = sqlite3.dbapi2.connect = original
        if callers:
            event.remove(Engine, "before_cursor_execute", attribute)


def _in_aiosqlite() -> bool:
    """Whether this thread is an aiosqlite connection's (it opens its connection there)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if "aiosqlite" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


def call_site(depth: int = 2) -> str:
    """The `depth` nearest project frames (file:line function) outside storage/ first."""
    frames = [f for f in _frames() if any(p in f.f_code.co_filename for p in _PROJECT)]
    outer = [f for f in frames if "/storage/" not in f.f_code.co_filename]
    chosen = (outer or frames)[:depth]
    return " < ".join(_where(f) for f in chosen) or "?"


def _frames() -> Iterator[FrameType]:
    """This thread's frames, innermost first, continued into the parent greenlet (whose
    suspended frames are the coroutines awaiting SQLAlchemy's `greenlet_spawn`)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        yield frame
        frame = frame.f_back
    try:
        import greenlet  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - SQLAlchemy's asyncio needs it
        return
    parent = greenlet.getcurrent().parent
    frame = parent.gr_frame if parent is not None else None
    while frame is not None:
        yield frame
        frame = frame.f_back


def _where(frame: FrameType) -> str:
    name = frame.f_code.co_filename
    for part in _PROJECT:
        if part in name:
            name = part.strip("/") + "/" + name.split(part, 1)[1]
            break
    return f"{name}:{frame.f_lineno} {frame.f_code.co_name}"
