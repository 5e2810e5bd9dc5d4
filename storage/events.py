"""Processed events: the keys of events already applied, for de-duplication.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Table, delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.prepared import Prepared
from flotilla.storage.tables import (
    ProcessedEvent,
)

events_t: Table = ProcessedEvent.__table__  # type: ignore[assignment]


_RECORD_EVENT_PG = postgresql.insert(events_t).on_conflict_do_nothing()
_RECORD_EVENT_SQLITE = sqlite.insert(events_t).on_conflict_do_nothing()
_RECORD_EVENT_PREPARED = Prepared(_RECORD_EVENT_SQLITE, keys=("key", "processed_at"))


def record_event(conn: Connection, key: str, now: datetime) -> bool:
    """Record `key` (an event id, or channel+ts) as applied. False when it was already.

    Call it inside the transaction that applies the event: a retried delivery then
    either sees the key or waits for the first transaction and finds it committed.
    Synchronous (the reconciler's one-hop transactions call it directly); an async
    caller runs it with `await conn.run_sync(record_event, key, now)`.
    """
    params = {"key": key, "processed_at": now}
    if Prepared.runs_on(conn):
        return bool(_RECORD_EVENT_PREPARED.execute(conn, params).rowcount)
    stmt = _RECORD_EVENT_PG if conn.dialect.name == "postgresql" else _RECORD_EVENT_SQLITE
    result = conn.execute(stmt, params)
    return bool(result.rowcount)


async def forget_processed_events_before(conn: AsyncConnection, cutoff: datetime) -> int:
    """Prune de-duplication keys older than any retry Slack would still send."""
    result = await conn.execute(delete(events_t).where(events_t.c.processed_at < cutoff))
    return int(result.rowcount)
