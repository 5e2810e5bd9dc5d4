"""The inbox: interactions, slash commands and Home openings stored before Slack's ack.

A row is inserted (de-duplicated by its `key`, made of Slack's ids) before the HTTP ack and
claimed by the process that stored it until `claimed_until`; its work done, it is marked
processed. A row still unprocessed after its claim ran out was cut short (a crash, a lost
connection) and is claimed again by a recovery pass.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.records import InboxRecord
from flotilla.storage.service_tables import InboxEntry
from flotilla.storage.sql import insert_ignoring_conflict

inbox_t: Table = InboxEntry.__table__  # type: ignore[assignment]


async def store_inbox(
    conn: AsyncConnection,
    *,
    key: str,
    kind: str,
    body: dict[str, Any],
    now: datetime,
    claimed_until: datetime,
) -> int | None:
    """Store one inbound request, claimed until `claimed_until`: its id, or None when a
    row with `key` exists already (a redelivery)."""
    stmt = insert_ignoring_conflict(
        conn,
        inbox_t,
        key=key,
        kind=kind,
        body=body,
        received_at=now,
        claimed_until=claimed_until,
        attempts=1,
        processed_at=None,
    ).returning(inbox_t.c.id)
    stored = (await conn.execute(stmt)).scalar_one_or_none()
    return None if stored is None else int(stored)


async def finish_inbox(conn: AsyncConnection, inbox_id: int, now: datetime) -> None:
    """Mark a row processed: its work is done (or answered with a sentence)."""
    await conn.execute(
        update(inbox_t)
        .where(inbox_t.c.id == inbox_id, inbox_t.c.processed_at.is_(None))
        .values(processed_at=now)
    )


async def claim_unprocessed_inbox(
    conn: AsyncConnection, now: datetime, until: datetime, *, limit: int = 50
) -> list[InboxRecord]:
    """Rows not processed whose claim ran out, oldest first, now claimed until `until`."""
    pending = (
        select(inbox_t.c.id)
        .where(inbox_t.c.processed_at.is_(None), inbox_t.c.claimed_until <= now)
        .order_by(inbox_t.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    ids = list((await conn.execute(pending)).scalars())
    if not ids:
        return []
    await conn.execute(
        update(inbox_t)
        .where(inbox_t.c.id.in_(ids))
        .values(claimed_until=until, attempts=inbox_t.c.attempts + 1)
    )
    rows = await conn.execute(select(inbox_t).where(inbox_t.c.id.in_(ids)).order_by(inbox_t.c.id))
    return [
        InboxRecord(id=r.id, key=r.key, kind=r.kind, body=r.body, attempts=r.attempts) for r in rows
    ]


async def count_unprocessed_inbox(conn: AsyncConnection) -> int:
    """How many stored requests are not processed yet (a gauge, and tests)."""
    stmt = select(func.count()).select_from(inbox_t).where(inbox_t.c.processed_at.is_(None))
    return int((await conn.execute(stmt)).scalar_one())


async def forget_processed_inbox_before(conn: AsyncConnection, cutoff: datetime) -> int:
    """Prune processed rows received before `cutoff` (their ids de-duplicate redeliveries,
    which come within minutes)."""
    result = await conn.execute(
        delete(inbox_t).where(inbox_t.c.processed_at.is_not(None), inbox_t.c.received_at < cutoff)
    )
    return int(result.rowcount)
