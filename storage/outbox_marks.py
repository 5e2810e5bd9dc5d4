"""The outbox rows' sent marks: rows delivered (and rows a job's settle ended) marked sent in
the caller's transaction, one statement for all of them.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import JSON, Table, bindparam, func, or_, select, update
from sqlalchemy.engine import Connection

from flotilla.storage.prepared import ROWS_A_STATEMENT, Prepared, run_sql
from flotilla.storage.tables import OutboxEntry

outbox_t: Table = OutboxEntry.__table__  # type: ignore[assignment]


def mark_sent(
    conn: Connection, sent: Sequence[int], now: datetime, *, keys: Sequence[str] = ()
) -> None:
    """Mark delivered rows sent (a row given up or settled meanwhile is left as it is);
    `keys`: rows settled in the same transaction, named by their idempotency keys (a
    job's row, `agents/running/job_settling.py`) – one statement for both."""
    if not sent and not keys:
        return
    params: dict[str, Any] = {"row_ids": list(sent), "sent_at": now}
    if keys:
        params["row_keys"] = list(keys)
    if not Prepared.runs_on(conn):
        conn.execute(_SETTLE_SENT if keys else _MARK_SENT, params)
    elif keys:
        _SETTLE_SENT_PREPARED.execute(conn, params)
    elif len(sent) == 1:
        _MARK_ONE_SENT.execute(conn, {"row_id": sent[0], "sent_at": now})
    elif len(sent) <= ROWS_A_STATEMENT and max(sent) - min(sent) < len(sent) + _SPAN_SLACK:
        _mark_sent_by_range(conn, sent, now)
    else:
        _MARK_SENT_PREPARED.execute(conn, params)


# On SQLite's DBAPI path, `id IN (…)` – a JSON array's values or a list of `?` – drives the
# UPDATE through a transient table (a pager, a b-tree and a zeroed page, set up and torn
# down per statement, ~25,000 instructions under callgrind: more than the update itself), and
# the state index another. Rows delivered together have ids close to each other (the rows of
# one write are consecutive), so instead the UPDATE walks the ids between the smallest and
# the largest, keeping those listed: `id BETWEEN ? AND ? AND (+id = ? OR …)` (the `+` keeps
# SQLite from turning the ORs back into an IN), with `+state` so that it walks the table, not
# the state index it changes. Up to `_SPAN_SLACK` rows between them are walked past for
# nothing – cheaper than the transient table.
_SPAN_SLACK = 32
_MARK_ONE_SENT = Prepared(
    update(outbox_t)
    .where(outbox_t.c.id == bindparam("row_id"), outbox_t.c.state == "pending")
    .values(state="sent", sent_at=bindparam("sent_at"))
)


def _mark_sent_by_range(conn: Connection, sent: Sequence[int], now: datetime) -> None:
    """Rows `sent` (2 to 16, close together) marked sent by one UPDATE on a range of ids."""
    bound = _MARK_ONE_SENT.bound(conn, {"row_id": min(sent), "sent_at": now})
    sql = _range_mark_sql(_MARK_ONE_SENT.names(conn.dialect), len(sent))
    run_sql(conn, sql, [*bound, max(sent), *sent])


@lru_cache(maxsize=ROWS_A_STATEMENT)
def _range_mark_sql(names: tuple[str, ...], rows: int) -> str:
    """`_MARK_ONE_SENT` for `rows` ids: its own parameters (the smallest id as `row_id`),
    then the largest id, then the ids."""
    at = {name: f"?{i}" for i, name in enumerate(names, start=1)}  # state, state_1: literals
    ids = " OR ".join(f"+id = ?{len(names) + 2 + i}" for i in range(rows))
    return (
        f"UPDATE outbox SET state = {at['state']}, sent_at = {at['sent_at']} "
        f"WHERE id BETWEEN {at['row_id']} AND ?{len(names) + 1} AND +state = {at['state_1']} "
        f"AND ({ids})"
    )


def _mark_sent(*, prepared: bool, by_key: bool) -> Any:
    """Pending rows marked sent: by id (`row_ids`), and with `by_key` by idempotency key
    too (`row_keys`: rows a job's settle ended, in its reconcile). Expanding IN lists for
    SQLAlchemy; for the DBAPI path, which compiles once, each list as one JSON array."""

    def among(column: Any, name: str) -> Any:
        if not prepared:
            return column.in_(bindparam(name, expanding=True))
        values = func.json_each(bindparam(name, type_=JSON)).table_valued("value")
        return column.in_(select(values.c.value))

    rows = among(outbox_t.c.id, "row_ids")
    if by_key:
        rows = or_(rows, among(outbox_t.c.idempotency_key, "row_keys"))
    return (
        update(outbox_t)
        .where(rows, outbox_t.c.state == "pending")
        .values(state="sent", sent_at=bindparam("sent_at"))
    )


# the rows delivered, one statement for all of them (and those settled with them)
_MARK_SENT = _mark_sent(prepared=False, by_key=False)
_MARK_SENT_PREPARED = Prepared(_mark_sent(prepared=True, by_key=False))
_SETTLE_SENT = _mark_sent(prepared=False, by_key=True)
_SETTLE_SENT_PREPARED = Prepared(_mark_sent(prepared=True, by_key=True))
