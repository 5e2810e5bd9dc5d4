"""Form answers, kept as outbox rows (`agents/form_answers.py` says why): one row per form,
keyed by the form, the first one stored wins; read back; made due at once.

The rows are ordinary outbox rows (`storage/outbox.py` delivers them); this module holds
only what a form's answer asks of that table beyond delivery. Every function takes an open
connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.outbox import outbox_t
from storage.records import StoredRow
from storage.sql import insert_ignoring_conflict


async def store_first(conn: AsyncConnection, row: dict[str, Any], now: datetime) -> StoredRow:
    """Insert the outbox row (`agents.effects.to_row`'s shape) unless one with its key is
    stored; the row stored under the key either way – this one, or the one before it."""
    stmt = insert_ignoring_conflict(
        conn,
        outbox_t,
        **row | {"available_at": row.get("available_at") or now},
        state="pending",
        attempts=0,
        failures=0,
        created_at=now,
    ).returning(outbox_t.c.id)
    inserted = (await conn.execute(stmt)).scalar_one_or_none()
    if inserted is not None:
        return StoredRow(id=int(inserted), payload=row["payload"], sent=False, claimed=False)
    stored = await stored_row(conn, row["idempotency_key"])
    assert stored is not None  # the conflict was this key's row
    return stored


async def stored_row(conn: AsyncConnection, key: str) -> StoredRow | None:
    """The outbox row stored under `key`, if any."""
    found = (
        await conn.execute(
            select(outbox_t.c.id, outbox_t.c.payload, outbox_t.c.state, outbox_t.c.attempts).where(
                outbox_t.c.idempotency_key == key
            )
        )
    ).first()
    if found is None:
        return None
    return StoredRow(
        id=int(found.id),
        payload=dict(found.payload),
        sent=found.state != "pending",
        claimed=found.attempts > 0,
    )


async def due_now(conn: AsyncConnection, key: str, now: datetime) -> bool:
    """Make the row of `key` due at once if it waits and was never claimed (a claim under
    way is left alone: taking it again would perform it twice); whether it was."""
    result = await conn.execute(
        update(outbox_t)
        .where(
            outbox_t.c.idempotency_key == key,
            outbox_t.c.state == "pending",
            outbox_t.c.attempts == 0,
            outbox_t.c.available_at > now,
        )
        .values(available_at=now)
    )
    return bool(result.rowcount)
