"""The reconcile's hot statements on SQLite: compiled once, run on the DBAPI cursor.

Why: a reconcile is one short transaction of a handful of small statements (the event
record, the plan load, the step and plan updates, the outbox rows). Executed through
SQLAlchemy, each pays its per-execution layers – `_execute_clauseelement`, the compiled
cache look-up, `_init_compiled`, `construct_params`, the type processors looked up per
call, events, the result wrapper – about 45 % of the transaction's CPU in a profile, more
than SQLite itself. `Prepared` keeps SQLAlchemy as the builder (the SQL is what SQLAlchemy
compiles for the dialect, the values go through the columns' own bind and result
processors, taken from the dialect once) and skips only those per-execution layers: the
statement is compiled once per dialect, and each execution is the DBAPI cursor's
`execute`/`executemany` with a plain parameter tuple.

Scope: SQLite's one-hop path (`storage/locks.py`), inside a transaction that
SQLAlchemy began (`BEGIN IMMEDIATE`, its `begin` hook) and commits or rolls back – the
statements run on that same DBAPI connection, so they are part of that transaction.
`Prepared.runs_on(conn)` says whether a connection takes this path; everything else
(PostgreSQL's locked path, aiosqlite) keeps executing the same statement through
SQLAlchemy. A driver error is raised as SQLAlchemy would raise it (`IntegrityError`,
`OperationalError`, …, with the driver's error as `orig`). SQLAlchemy's
`before_cursor_execute` events do not see these statements (SQLite's trace callback does).

On PostgreSQL, the optimistic reconcile's two statements (`storage/optimistic.py`) take the
same way on asyncpg's own connection (`DriverConnection`, `Prepared.fetch`): awaited
directly – no `run_sync`, no greenlet switch per statement, none of the layers above – outside
any transaction (each statement its own transaction, as on an autocommit connection), with
asyncpg's statement cache preparing each once per connection. Driver errors are raised as
SQLAlchemy's asyncpg dialect raises them (`IntegrityError`, … with `orig`).
"""

from __future__ import annotations

import sqlite3
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from operator import itemgetter
from typing import Any

from sqlalchemy import JSON, DateTime, Table, insert
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ClauseElement

# The stdlib driver binds a parameter of a type other than int, float, str and bytes
# through its adapter protocol: `None` (NULL) looked up in the adapter registry, then
# `PrepareProtocol.__adapt__` – a miss that formats an AttributeError's message, then
# discards it – and `None.__conform__`: ~1 µs for each NULL a statement binds, ~15 of
# them a reconcile. Registered, the look-up finds this adapter at once, and its answer is
# the same `None`, bound as NULL as before (`{}.get` is a C call that answers None). Process
# wide: every SQLite connection of the process (aiosqlite's too) binds NULL this way.
sqlite3.register_adapter(type(None), dict[Any, None]().get)


@dataclass(frozen=True, slots=True)
class _Compiled:
    sql: str
    getter: Callable[[dict[str, Any]], tuple[Any, ...]]  # the values, in the order of the `?`
    defaults: dict[str, Any]  # values the parameters may leave out (literals, column defaults)
    processors: tuple[tuple[int, Callable[[Any], Any]], ...]  # (position, bind processor)
    columns: tuple[str, ...]  # a SELECT's result keys
    results: tuple[tuple[str, Callable[[Any], Any]], ...]  # (key, result processor)
    names: tuple[str, ...]  # the parameters, in the order of the `?`


@dataclass(frozen=True, slots=True)
class DriverConnection:
    """A pooled PostgreSQL connection's asyncpg connection, used directly while no
    transaction is open on it (each statement is then its own transaction), and the
    dialect its statements are compiled for."""

    dialect: Dialect
    driver: Any  # asyncpg.Connection


class Prepared:
    """A statement compiled once per dialect and run on the DBAPI cursor (see the module
    docstring). `keys`: the columns an INSERT's rows give (the others get their scalar
    defaults, as SQLAlchemy would)."""

    def __init__(self, statement: ClauseElement, *, keys: Sequence[str] | None = None) -> None:
        self.statement: Any = statement
        self._keys = list(keys) if keys is not None else None
        # per dialect (weakly: a disposed engine's dialect goes with it); the last one in front
        self._compiled: weakref.WeakKeyDictionary[Dialect, _Compiled] = weakref.WeakKeyDictionary()
        self._last: tuple[Dialect, _Compiled] | None = None

    @staticmethod
    def runs_on(conn: Connection) -> bool:
        """Whether `conn` takes the DBAPI path: the stdlib SQLite driver (the worker
        thread's engine, `storage/locks.py`); aiosqlite and PostgreSQL do not."""
        return conn.dialect.name == "sqlite" and conn.dialect.driver == "pysqlite"

    def _for(self, dialect: Dialect) -> _Compiled:
        last = self._last
        if last is not None and last[0] is dialect:
            return last[1]
        found = self._compiled.get(dialect)
        if found is None:
            found = self._compiled[dialect] = _compile(self.statement, dialect, self._keys)
        self._last = (dialect, found)
        return found

    def _row(self, compiled: _Compiled, params: dict[str, Any]) -> list[Any]:
        if compiled.defaults:
            params = compiled.defaults | params
        values = list(compiled.getter(params))
        for i, process in compiled.processors:
            values[i] = process(values[i])
        return values

    def names(self, dialect: Dialect) -> tuple[str, ...]:
        """The statement's parameters, in the order of its `?`."""
        return self._for(dialect).names

    def bound(self, conn: Connection, params: dict[str, Any]) -> list[Any]:
        """One row of parameters as the statement binds them (in `names` order, each value
        through its bind processor): for SQL built around this statement's values."""
        return self._row(self._for(conn.dialect), params)

    def rowcount(self, conn: Connection, params: dict[str, Any]) -> int:
        """Run with one row of parameters on either path; the rows it changed."""
        if not self.runs_on(conn):
            return int(conn.execute(self.statement, params).rowcount)
        return int(self.execute(conn, params).rowcount)

    def rows(self, conn: Connection, params: dict[str, Any]) -> list[Any]:
        """A SELECT's rows as mappings, on either path."""
        if not self.runs_on(conn):
            return list(conn.execute(self.statement, params).mappings())
        return self.mappings(conn, params)

    def execute(self, conn: Connection, params: dict[str, Any]) -> Any:
        """Run with one row of parameters; the DBAPI cursor (rowcount, lastrowid, rows)."""
        compiled = self._for(conn.dialect)
        cursor = _dbapi(conn).cursor()
        values = self._row(compiled, params)
        try:
            cursor.execute(compiled.sql, values)
        except conn.dialect.loaded_dbapi.Error as exc:
            raise _wrapped(conn, compiled.sql, values, exc) from exc
        return cursor

    def executemany(self, conn: Connection, params: Sequence[dict[str, Any]]) -> int:
        """Run once per row of parameters; the rows changed in all."""
        compiled = self._for(conn.dialect)
        cursor = _dbapi(conn).cursor()
        rows = [self._row(compiled, p) for p in params]
        try:
            cursor.executemany(compiled.sql, rows)
        except conn.dialect.loaded_dbapi.Error as exc:
            raise _wrapped(conn, compiled.sql, rows, exc) from exc
        return int(cursor.rowcount)

    def insert_rows(self, conn: Connection, params: Sequence[dict[str, Any]]) -> list[int]:
        """An INSERT's rows as multi-row statements (`VALUES (…), (…)`, `ROWS_A_STATEMENT`
        rows each): one statement for SQLite to run where `executemany` runs one a row. The
        new rows' ids, in the order of `params`.

        The ids come from each statement's `lastrowid`, not from `RETURNING`, which SQLite
        answers through a transient table (a pager, a b-tree and a zeroed page set up and
        torn down per statement – more CPU than the INSERT itself, counted under callgrind).
        A statement's rows take consecutive ids: SQLite gives each new row the largest id
        in the table plus one, the rows of one statement in order, inside the caller's write
        transaction; it picks ids at random only once the largest id is 2**63 − 1, which ids
        given by SQLite, counting up from 1, do not reach. For tables whose ids Flotilla
        never gives, without `ON CONFLICT` clauses (a conflict raises, and the transaction
        rolls back)."""
        compiled = self._for(conn.dialect)
        ids: list[int] = []
        for start in range(0, len(params), ROWS_A_STATEMENT):
            chunk = params[start : start + ROWS_A_STATEMENT]
            values = [v for p in chunk for v in self._row(compiled, p)]
            last = int(run_sql(conn, _rows_sql(compiled.sql, len(chunk)), values).lastrowid)
            ids.extend(range(last - len(chunk) + 1, last + 1))
        return ids

    def mappings(self, conn: Connection, params: dict[str, Any]) -> list[dict[str, Any]]:
        """A SELECT's rows as dicts, each value through its column's result processor."""
        compiled = self._for(conn.dialect)
        cursor = self.execute(conn, params)
        rows = [dict(zip(compiled.columns, row, strict=True)) for row in cursor.fetchall()]
        for key, process in compiled.results:
            for row in rows:
                row[key] = process(row[key])
        return rows

    async def fetch(self, conn: DriverConnection, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Run on asyncpg's connection; the rows as dicts (a SELECT's values through its
        columns' result processors; another statement's by the names it returns)."""
        compiled = self._for(conn.dialect)
        values = self._row(compiled, params)
        try:
            records = await conn.driver.fetch(compiled.sql, *values)
        except Exception as exc:
            raise _wrapped_asyncpg(conn.dialect, compiled.sql, values, exc) from exc
        if not compiled.columns:
            return [dict(record) for record in records]
        rows = [dict(zip(compiled.columns, record, strict=True)) for record in records]
        for key, process in compiled.results:
            for row in rows:
                row[key] = process(row[key])
        return rows


# Rows a multi-row statement carries (an INSERT's `VALUES`, a guarded UPDATE's rows): few
# enough that SQLite parses each row count's text once per connection and the stdlib
# driver's statement cache keeps them (`sqlite_connect_args`'s `cached_statements`) – a
# statement's text is parsed and planned again for every new row count, ~35,000
# instructions a row of a step's 19 columns, more than inserting it.
ROWS_A_STATEMENT = 16


@lru_cache(maxsize=128)
def _rows_sql(sql: str, rows: int) -> str:
    """A one-row `INSERT … VALUES (?, …)` made to insert `rows` rows."""
    head, _, group = sql.rpartition(" VALUES ")
    if not head or not (group.startswith("(") and group.endswith(")")):
        raise TypeError(f"not a plain one-row INSERT: {sql}")
    return f"{head} VALUES {', '.join([group] * rows)}"


def run_sql(conn: Connection, sql: str, values: Sequence[Any]) -> Any:
    """SQL built for the DBAPI path (positional `?`, values already bound) run on the
    transaction's driver connection; its cursor. Errors as SQLAlchemy raises them."""
    try:
        return _dbapi(conn).execute(sql, values)
    except conn.dialect.loaded_dbapi.Error as exc:
        raise _wrapped(conn, sql, values, exc) from exc


def _wrapped_asyncpg(dialect: Dialect, sql: str, params: Any, exc: Exception) -> BaseException:
    """An asyncpg error as SQLAlchemy's asyncpg dialect raises it (its DBAPI adapter's
    class for the error, wrapped in SQLAlchemy's `DBAPIError` subclass)."""
    dbapi: Any = dialect.loaded_dbapi
    translate: dict[type, Any] = getattr(dbapi, "_asyncpg_error_translate", {})
    for cls in type(exc).__mro__:
        if cls in translate:
            exc = translate[cls](exc.args[0] if exc.args else str(exc), exc)
            break
    else:
        return exc
    return DBAPIError.instance(sql, params, exc, dbapi.Error, dialect=dialect)


def _wrapped(conn: Connection, sql: str, params: Any, exc: Exception) -> BaseException:
    """The driver's error as SQLAlchemy raises it (`IntegrityError`, `OperationalError`, …),
    so callers see the same exceptions as on SQLAlchemy's path."""
    base = conn.dialect.loaded_dbapi.Error
    return DBAPIError.instance(sql, params, exc, base, dialect=conn.dialect)


def _dbapi(conn: Connection) -> Any:
    """The stdlib driver's connection under `conn`: the pool's `dbapi_connection`
    attribute (for pysqlite the driver's connection itself), not `driver_connection`'s
    three property calls through the pool record and the dialect, once per statement."""
    return conn.connection.dbapi_connection


def _compile(statement: Any, dialect: Dialect, keys: list[str] | None) -> _Compiled:
    compiled: Any = statement.compile(dialect=dialect, column_keys=keys)
    if not dialect.positional or compiled.positiontup is None:
        raise TypeError(f"{dialect.name}: only a positional dialect is prepared here")
    names = tuple(compiled.positiontup)
    prefetch = {c.key: c for c in getattr(compiled, "insert_prefetch", ())}
    processors: list[tuple[int, Callable[[Any], Any]]] = []
    defaults: dict[str, Any] = {}
    for position, name in enumerate(names):
        bind = compiled.binds[name]
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            processors.append((position, _shortcut(process, bind.type)))
        if name in prefetch:  # a column the rows do not give: its scalar default
            default = prefetch[name].default
            if default is None or not default.is_scalar:
                raise TypeError(f"{name}: give the column (its default is not a constant)")
            defaults[name] = default.arg
        elif not bind.required and bind.callable is None:
            defaults[name] = bind.value  # a literal, or a bindparam's default value
    getter = _values_of(names)
    columns: tuple[str, ...] = ()
    results: list[tuple[str, Callable[[Any], Any]]] = []
    if getattr(statement, "is_select", False):
        selected: Any = statement.selected_columns
        columns = tuple(selected.keys())
        for key, column in zip(columns, selected, strict=True):
            process = column.type.dialect_impl(dialect).result_processor(dialect, None)
            if process is not None:
                results.append((key, process))
    return _Compiled(
        compiled.string, getter, defaults, tuple(processors), columns, tuple(results), names
    )


def _shortcut(process: Callable[[Any], Any], type_: Any) -> Callable[[Any], Any]:
    """`process` with its common inputs answered without the work: a timestamp column's
    `None` and its last value (a transaction writes the same `now` into many columns:
    compared by identity, datetimes are immutable), a JSON column's `None` and empty list
    (each answer computed once here, by `process` itself). The same output as `process`'s,
    byte for byte."""
    affinity = getattr(type_, "_type_affinity", None)
    if affinity is not None and issubclass(affinity, DateTime):
        return _last_value(process)
    if affinity is not None and issubclass(affinity, JSON):
        return _common_json(process)
    return process


def _last_value(process: Callable[[Any], Any]) -> Callable[[Any], Any]:
    last: tuple[datetime, Any] | None = None  # replaced whole: safe beside other threads
    null = process(None)

    def remembered(value: Any) -> Any:
        nonlocal last
        if value is None:
            return null
        seen = last
        if seen is not None and value is seen[0]:
            return seen[1]
        out = process(value)
        if type(value) is datetime:
            last = (value, out)
        return out

    return remembered


def _common_json(process: Callable[[Any], Any]) -> Callable[[Any], Any]:
    null, empty = process(None), process([])

    def common(value: Any) -> Any:
        if value is None:
            return null
        if type(value) is list and not value:
            return empty
        return process(value)

    return common


def _values_of(names: tuple[str, ...]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """The parameters' values in statement order, as one tuple (itemgetter, in C)."""
    if len(names) == 1:
        only = itemgetter(names[0])
        return lambda params: (only(params),)
    return itemgetter(*names)


_inserts: dict[tuple[Table, tuple[str, ...]], Prepared] = {}


def prepared_insert(table: Table, row: dict[str, Any]) -> Prepared:
    """The `INSERT` of `table`'s columns that `row` gives (each set of columns compiled once)."""
    key = (table, tuple(row))
    found = _inserts.get(key)
    if found is None:
        found = _inserts[key] = Prepared(insert(table), keys=key[1])
    return found
