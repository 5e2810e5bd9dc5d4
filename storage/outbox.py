"""The outbox: side effects decided in a transaction, performed after commit.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table, bindparam, func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.outbox_marks import mark_sent
from flotilla.storage.prepared import Prepared, prepared_insert
from flotilla.storage.records import (
    OutboxRecord,
    StoredRow,
)
from flotilla.storage.sql import insert_ignoring_conflict
from flotilla.storage.tables import (
    OutboxEntry,
)

outbox_t: Table = OutboxEntry.__table__  # type: ignore[assignment]


_INSERT = insert(outbox_t)


def enqueue_effects(
    conn: Connection,
    rows: Sequence[dict[str, Any]],
    now: datetime,
    *,
    ignore_duplicates: bool = False,
) -> int:
    """Outbox rows (`idempotency_key`, `kind`, `conversation_id`, `payload`, `available_at`),
    in the caller's transaction; how many were inserted.

    By default a duplicate key is an integrity error that rolls the transaction back (the
    reconciler's guarantee); `ignore_duplicates` skips rows whose key exists. Synchronous:
    an async caller runs it with `await conn.run_sync(enqueue_effects, rows, now)`.
    """
    if not rows:
        return 0
    values = [
        {"state": "pending", "attempts": 0, "created_at": now}
        | r
        | {"available_at": r.get("available_at") or now}
        for r in rows
    ]
    if not ignore_duplicates:
        if Prepared.runs_on(conn):
            prepared_insert(outbox_t, values[0]).insert_rows(conn, values)  # ids unused
        else:
            conn.execute(_INSERT, values)
        return len(values)
    inserted = 0
    for value in values:
        inserted += conn.execute(insert_ignoring_conflict(conn, outbox_t, **value)).rowcount
    return inserted


def enqueue_claimed(
    conn: Connection, rows: Sequence[dict[str, Any]], now: datetime, *, lease_until: datetime
) -> list[OutboxRecord]:
    """Outbox rows inserted already claimed by the calling process until `lease_until`
    (attempts 1), in the caller's transaction – what `settle_and_claim` would return for
    them, without a transaction of its own. A duplicate key rolls the transaction back."""
    if not rows:
        return []
    values = [_claimed_value(r, now, lease_until) for r in rows]
    if Prepared.runs_on(conn):  # one INSERT for all (up to 16 rows), the ids consecutive
        ids = prepared_insert(outbox_t, values[0]).insert_rows(conn, values)
    else:
        ids = [row.id for row in conn.execute(_INSERT_CLAIMED, values).all()]
    return [claimed_record(value, i, now) for i, value in zip(ids, values, strict=True)]


def enqueue_claimed_unless_present(
    conn: Connection, row: dict[str, Any], now: datetime, *, lease_until: datetime
) -> OutboxRecord | None:
    """One outbox row inserted already claimed (`enqueue_claimed`) unless a row with its key
    exists: then None, and nothing is inserted (that row is delivered as it is)."""
    value = _claimed_value(row, now, lease_until)
    insert_row = insert_ignoring_conflict(conn, outbox_t, **value).returning(outbox_t.c.id)
    row_id = conn.execute(insert_row).scalar()
    return None if row_id is None else claimed_record(value, int(row_id), now)


def _claimed_value(row: dict[str, Any], now: datetime, lease_until: datetime) -> dict[str, Any]:
    """An outbox row's values as inserted claimed: one delivery begun, leased until then."""
    return (
        {"state": "pending", "created_at": now}
        | dict(row)
        | {"attempts": 1, "failures": 0, "available_at": lease_until}
    )


def claimed_record(row: dict[str, Any], row_id: int, now: datetime) -> OutboxRecord:
    """The record of an outbox row (`enqueue_effects`'s shape) inserted claimed as `row_id`."""
    return OutboxRecord(
        id=row_id,
        idempotency_key=row["idempotency_key"],
        conversation_id=row["conversation_id"],
        kind=row["kind"],
        payload=row["payload"],
        attempts=1,
        failures=0,
        created_at=now,
    )


def settle_and_claim(
    conn: Connection,
    *,
    sent: Sequence[int] = (),
    now: datetime,
    lease_until: datetime,
    limit: int = 20,
) -> list[OutboxRecord]:
    """Mark the rows `sent` (delivered since the last claim) and claim due rows for this
    process until `lease_until` – the sender's whole bookkeeping in one transaction.

    The claim is one `UPDATE … RETURNING` over the oldest due rows; on PostgreSQL rows
    another replica is claiming are skipped (`FOR UPDATE SKIP LOCKED` in the sub-select),
    on SQLite the write transaction already serialises claimers. Synchronous: the sender
    runs it on a worker thread (SQLite) or through `run_sync` (PostgreSQL).
    """
    mark_sent(conn, sent, now)
    if limit <= 0:
        return []
    claim = _CLAIM_PG if conn.dialect.name == "postgresql" else _CLAIM
    params = {"claim_now": now, "claim_lease_until": lease_until, "claim_limit": limit}
    rows = conn.execute(claim, params).all()
    return sorted(
        (
            OutboxRecord(
                id=r.id,
                idempotency_key=r.idempotency_key,
                conversation_id=r.conversation_id,
                kind=r.kind,
                payload=r.payload,
                attempts=r.attempts,
                failures=r.failures,
                created_at=r.created_at,
            )
            for r in rows
        ),
        key=lambda record: record.id,
    )


_CLAIMED = (
    outbox_t.c.id,
    outbox_t.c.idempotency_key,
    outbox_t.c.conversation_id,
    outbox_t.c.kind,
    outbox_t.c.payload,
    outbox_t.c.attempts,
    outbox_t.c.failures,
    outbox_t.c.created_at,
)
_INSERT_CLAIMED = insert(outbox_t).returning(outbox_t.c.id, sort_by_parameter_order=True)


def _claim(*, skip_locked: bool) -> Any:
    """The claim statement (built once): the oldest due rows, leased to the caller."""
    due = (
        select(outbox_t.c.id)
        .where(outbox_t.c.state == "pending", outbox_t.c.available_at <= bindparam("claim_now"))
        .order_by(outbox_t.c.id)
        .limit(bindparam("claim_limit"))
    )
    if skip_locked:
        due = due.with_for_update(skip_locked=True)
    return (
        update(outbox_t)
        .where(outbox_t.c.id.in_(due.scalar_subquery()))
        .values(available_at=bindparam("claim_lease_until"), attempts=outbox_t.c.attempts + 1)
        .returning(*_CLAIMED)
    )


_CLAIM = _claim(skip_locked=False)
_CLAIM_PG = _claim(skip_locked=True)


async def claim_effects(
    conn: AsyncConnection, *, now: datetime, lease_until: datetime, limit: int = 20
) -> list[OutboxRecord]:
    """Claim due outbox rows for this process until `lease_until` (see `settle_and_claim`)."""
    return await conn.run_sync(
        lambda sync: settle_and_claim(sync, now=now, lease_until=lease_until, limit=limit)
    )


async def extend_claim(
    conn: AsyncConnection, effect_id: int, attempts: int, until: datetime
) -> bool:
    """Keep a row claimed until `until` while its claim is still the caller's (nobody
    claimed it since: `attempts` unchanged, still pending); whether it was."""
    result = await conn.execute(
        update(outbox_t)
        .where(
            outbox_t.c.id == effect_id,
            outbox_t.c.state == "pending",
            outbox_t.c.attempts == attempts,
        )
        .values(available_at=until)
    )
    return bool(result.rowcount)


async def mark_effect_done(conn: AsyncConnection, effect_id: int, now: datetime) -> None:
    await conn.execute(
        update(outbox_t).where(outbox_t.c.id == effect_id).values(state="sent", sent_at=now)
    )


async def hold_effect(conn: AsyncConnection, key: str, until: datetime) -> None:
    """Keep a pending row claimed until `until` (now: free it for any process)."""
    await conn.execute(
        update(outbox_t)
        .where(outbox_t.c.idempotency_key == key, outbox_t.c.state == "pending")
        .values(available_at=until)
    )


_FINISH_EFFECT = (
    update(outbox_t)
    .where(outbox_t.c.idempotency_key == bindparam("b_key"), outbox_t.c.state == "pending")
    .values(state="sent", sent_at=bindparam("b_now", type_=outbox_t.c.sent_at.type))
)


async def finish_effect(conn: AsyncConnection, key: str, now: datetime) -> None:
    """Mark the row of `key` sent (long work settling its effect)."""
    await conn.execute(_FINISH_EFFECT, {"b_key": key, "b_now": now})


async def retry_effect_later(
    conn: AsyncConnection, effect_id: int, *, error: str, available_at: datetime
) -> None:
    await conn.execute(
        update(outbox_t)
        .where(outbox_t.c.id == effect_id)
        .values(
            available_at=available_at,
            last_error=error[:2000],
            failures=outbox_t.c.failures + 1,
        )
    )


async def give_up_effect(conn: AsyncConnection, effect_id: int, *, error: str) -> None:
    await conn.execute(
        update(outbox_t)
        .where(outbox_t.c.id == effect_id)
        .values(state="failed", last_error=error[:2000])
    )


async def pending_effect_count(conn: AsyncConnection) -> int:
    return int(
        await conn.scalar(
            select(func.count()).select_from(outbox_t).where(outbox_t.c.state == "pending")
        )
        or 0
    )


async def next_effect_due(conn: AsyncConnection) -> datetime | None:
    """When the earliest pending outbox row becomes due (None when nothing is pending)."""
    due: datetime | None = await conn.scalar(
        select(func.min(outbox_t.c.available_at)).where(outbox_t.c.state == "pending")
    )
    if due is not None and due.tzinfo is None:  # SQLite's MIN() bypasses the column type
        due = due.replace(tzinfo=UTC)
    return due


async def fail_held_effect(
    conn: AsyncConnection, key: str, *, error: str, available_at: datetime
) -> int:
    """Long work holding the row of `key` met a failure worth another try: count it and
    make the row due at `available_at`; the failures so far (0 when the row is gone)."""
    await conn.execute(
        update(outbox_t)
        .where(outbox_t.c.idempotency_key == key, outbox_t.c.state == "pending")
        .values(
            available_at=available_at,
            last_error=error[:2000],
            failures=outbox_t.c.failures + 1,
        )
    )
    failures = await conn.scalar(
        select(outbox_t.c.failures).where(
            outbox_t.c.idempotency_key == key, outbox_t.c.state == "pending"
        )
    )
    return int(failures or 0)


async def give_up_held_effect(conn: AsyncConnection, key: str, *, error: str) -> None:
    """Long work gave its row up for good (it kept failing)."""
    await conn.execute(
        update(outbox_t)
        .where(outbox_t.c.idempotency_key == key, outbox_t.c.state == "pending")
        .values(state="failed", last_error=error[:2000])
    )


# --- rows read back by their key: a form's answer (`agents/delivering/form_answers.py` says why it
# is
# stored as an outbox row; the first one stored under a form's key wins) --------------------


async def store_first(conn: AsyncConnection, row: dict[str, Any], now: datetime) -> StoredRow:
    """Insert the outbox row (`agents.planning.effects.to_row`'s shape) unless one with its key is
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
