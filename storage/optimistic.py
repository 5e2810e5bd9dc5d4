"""Optimistic concurrency for a conversation's plan on PostgreSQL: a reconcile in two statements.

The locked path (`storage/locks.py`) costs a round trip per statement plus BEGIN and COMMIT.
This one runs on asyncpg's own connection outside any transaction (every statement its own
transaction; the statements compiled by SQLAlchemy once and awaited on the driver directly,
`storage.prepared.DriverConnection`):

1. `load_versioned` – the newest plan and its steps (`storage.plans.plan_query`), the
   conversation's `lock_version` and whether the event was applied already, in one SELECT;
2. the caller decides (pure);
3. `write_versioned` – one statement whose CTEs bump `conversations.lock_version` only
   `WHERE lock_version = :read` and, only if that row was updated, record the event,
   write the changed and added steps (each guarded by the status and attempts read), the
   plan row (guarded by its version) and the outbox rows. One statement is one
   transaction: all of it is written, or – when the version moved on – nothing, and
   `VersionConflict` tells the caller to read again and decide again.

Every other writer of a conversation's plan takes the row lock through `storage.locks.lock`,
which moves `lock_version` on as well, so a read that is not the latest never writes. A
step guard that does not hold under a matching version (a writer that bypassed both) makes
the statement fail – `CAST` of a sentence to an integer, the one way plain SQL has to abort
a statement – so nothing of it is kept (`ConcurrentPlanChange`). Duplicate outbox keys and
event keys fail the statement on their unique indexes, as in the locked path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Table, bindparam, exists, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError

from flotilla.storage.conversations import conversations_t
from flotilla.storage.events import events_t
from flotilla.storage.outbox import outbox_t
from flotilla.storage.plan_steps import MUTABLE_FIELDS, STEP_FIELDS, steps_t
from flotilla.storage.plans import LoadedPlan, loaded_plan, plan_query, plans_t
from flotilla.storage.prepared import DriverConnection, Prepared
from flotilla.storage.sql import ConcurrentPlanChange


class VersionConflict(RuntimeError):
    """The conversation's lock version moved on between the read and the write: read again."""


@dataclass(frozen=True, slots=True)
class VersionedPlan:
    """A stored plan as `load_latest_plan` reads it, with the conversation's lock version
    and whether the event being applied was applied already."""

    loaded: LoadedPlan
    lock_version: int
    event_seen: bool


_event_seen = exists().where(events_t.c.key == bindparam("event_key")).label("event_seen")
_LATEST = (
    plans_t.select()
    .with_only_columns(plans_t.c.id)
    .where(plans_t.c.conversation_id == bindparam("conversation_id"))
    .order_by(plans_t.c.id.desc())
    .limit(1)
)
_LATEST_ID = _LATEST.scalar_subquery()
# the card check refers to no column of the row: evaluated once, not once per step
_CARD_OF: tuple[Any, Any] = (bindparam("conversation_id"), _LATEST_ID)
_LOAD = plan_query(plans_t.c.id == _LATEST_ID, unless_known=True, card_of=_CARD_OF).add_columns(
    conversations_t.c.lock_version, _event_seen
)
_LOAD_PREPARED = Prepared(_LOAD)


async def load_versioned(
    conn: DriverConnection,
    conversation_id: int,
    *,
    known: tuple[int, int] | None = None,
    event_key: str | None = None,
) -> VersionedPlan | None:
    """The conversation's newest plan (steps left out when still at `known` = (plan id,
    version)), its lock version and whether `event_key` was applied – one statement."""
    known_id, known_version = known if known is not None else (-1, -1)
    params = {
        "conversation_id": conversation_id,
        "known_id": known_id,
        "known_version": known_version,
        "event_key": event_key,
    }
    rows = await _LOAD_PREPARED.fetch(conn, params)
    loaded = loaded_plan(rows, known_version if known is not None else None)
    if loaded is None:
        return None
    return VersionedPlan(loaded, int(rows[0]["lock_version"]), bool(rows[0]["event_seen"]))


# --- the write: one statement ---------------------------------------------------------------


_PG = postgresql.dialect()  # type: ignore[no-untyped-call]


def _sql_type(column: Column[Any]) -> str:
    return str(column.type.compile(dialect=_PG))


def _record(table: Table, names: Sequence[str], extra: str = "") -> str:
    """A `json_to_recordset` column list for `names` of `table`, typed as the table is."""
    columns = [f'"{name}" {_sql_type(table.c[name])}' for name in names]
    return ", ".join([*columns, extra] if extra else columns)


_CHANGED = ("index", *MUTABLE_FIELDS, "started_at", "finished_at")
_ADDED = ("index", *STEP_FIELDS, "started_at", "finished_at")
_EFFECT = ("idempotency_key", "kind", "payload", "available_at", "attempts")
_GUARD_FAILED = "concurrent plan change"
_NOW = "CAST(:now AS TIMESTAMP WITH TIME ZONE)"
_PLAN_ID = "CAST(:plan_id AS BIGINT)"
_CONVERSATION = "CAST(:conversation_id AS BIGINT)"


def _write_sql(*, added: bool, sent: bool, claimed: bool) -> str:
    """The write statement, with only the parts a reconcile needs: the CTE inserting added
    steps only with `added`, the one marking the sender's rows only with `sent`, the claimed
    rows' ids and keys only with `claimed` (each CTE left in is a table and its indexes
    opened, and a few nodes set up, on every execution, even with nothing to do)."""
    added_cte = f"""
added_steps AS (
    INSERT INTO plan_steps (plan_id, {", ".join(f'"{n}"' for n in _ADDED)})
    SELECT {_PLAN_ID}, {", ".join(f'r."{n}"' for n in _ADDED)}
    FROM version, json_to_recordset(CAST(:added_steps AS JSON)) AS r({_record(steps_t, _ADDED)})
    RETURNING id
),"""
    marked_cte = f"""
marked AS (
    UPDATE outbox SET state = 'sent', sent_at = {_NOW}
    FROM version
    WHERE outbox.id = ANY(CAST(:sent AS BIGINT[])) AND outbox.state = 'pending'
    RETURNING outbox.id
),"""
    claimed_of = "FROM effects WHERE attempts = 1 ORDER BY idempotency_key"
    return f"""
WITH version AS (
    UPDATE conversations SET lock_version = lock_version + 1
    WHERE id = {_CONVERSATION} AND lock_version = CAST(:lock_version AS INTEGER)
    RETURNING id
),
event AS (
    INSERT INTO processed_events (key, processed_at)
    SELECT CAST(:event_key AS VARCHAR), {_NOW} FROM version
    WHERE CAST(:event_key AS VARCHAR) IS NOT NULL
    RETURNING key
),
changed_steps AS (
    UPDATE plan_steps AS s SET
        {", ".join(f'"{n}" = r."{n}"' for n in MUTABLE_FIELDS)},
        started_at = coalesce(r.started_at, s.started_at),
        finished_at = r.finished_at
    FROM version, json_to_recordset(CAST(:changed_steps AS JSON)) AS r(
        {_record(steps_t, _CHANGED, "was_status VARCHAR, was_attempts INTEGER")}
    )
    WHERE s.plan_id = {_PLAN_ID} AND s."index" = r."index"
        AND s.status = r.was_status AND s.attempts = r.was_attempts
    RETURNING s.id
),{added_cte if added else ""}
plan AS (
    UPDATE plans SET status = CAST(:status AS VARCHAR), version = CAST(:version AS INTEGER),
        updated_at = {_NOW}
    FROM version
    WHERE plans.id = {_PLAN_ID} AND plans.version = CAST(:was_version AS INTEGER)
        AND CAST(:write_plan AS BOOLEAN)
    RETURNING plans.id
),{marked_cte if sent else ""}
effects AS (
    INSERT INTO outbox (idempotency_key, kind, conversation_id, payload, state, attempts,
        failures, available_at, created_at)
    SELECT r.idempotency_key, r.kind, {_CONVERSATION}, r.payload, 'pending', r.attempts, 0,
        coalesce(r.available_at, {_NOW}), {_NOW}
    FROM version, json_to_recordset(CAST(:effects AS JSON)) AS r({_record(outbox_t, _EFFECT)})
    RETURNING id, idempotency_key, attempts
)
SELECT
    c.locked, c.marked, c.claimed_ids, c.claimed_keys,
    CASE
        WHEN c.locked = 0 OR (
            c.steps = CAST(:changed_count AS INTEGER) AND c.plans = CAST(:plan_count AS INTEGER)
        ) THEN 0
        ELSE CAST(
            '{_GUARD_FAILED}: ' || c.steps || ' steps, ' || c.plans || ' plan rows' AS INTEGER
        )
    END AS guard
FROM (
    SELECT
        (SELECT count(*) FROM version) AS locked,
        {"(SELECT count(*) FROM marked)" if sent else "0"} AS marked,
        {f"ARRAY(SELECT id {claimed_of})" if claimed else "CAST('{}' AS BIGINT[])"}
            AS claimed_ids,
        {f"ARRAY(SELECT idempotency_key {claimed_of})" if claimed else "CAST('{}' AS TEXT[])"}
            AS claimed_keys,
        (SELECT count(*) FROM changed_steps) AS steps,
        (SELECT count(*) FROM plan) AS plans
    OFFSET 0  -- each count once (pulled up, the guard's message would count again)
) AS c
"""


_WRITES = {
    (added, sent, claimed): Prepared(text(_write_sql(added=added, sent=sent, claimed=claimed)))
    for added in (False, True)
    for sent in (False, True)
    for claimed in (False, True)
}


@dataclass(frozen=True, slots=True)
class PlanWrite:
    """What one reconcile writes: the changed steps (each with the status and attempts it
    was read with), the added steps, the plan's new status and version (None: the plan row
    is unchanged) and the outbox rows – `claimed`: rows inserted already claimed for this
    process's sender, `sent`: rows its sender delivered since its last transaction."""

    plan_id: int
    changed: Sequence[tuple[dict[str, Any], str, int]] = ()
    added: Sequence[dict[str, Any]] = ()
    status: str | None = None
    was_status: str | None = None  # as read: the status is not written again when the same
    version: int = 0
    was_version: int = 0
    effects: Sequence[dict[str, Any]] = ()
    claimed: Sequence[dict[str, Any]] = ()
    sent: Sequence[int] = ()
    lease_until: datetime | None = None  # of the claimed rows


async def write_versioned(
    conn: DriverConnection,
    conversation_id: int,
    lock_version: int,
    write: PlanWrite,
    *,
    event_key: str | None,
    now: datetime,
) -> dict[str, int]:
    """Everything one reconcile decided, in one statement, if the conversation is still at
    `lock_version`: also the claimed rows (inserted leased to the caller's sender until
    `write.lease_until`) and the sender's delivered rows marked sent. The ids of the claimed
    rows, by key. Raises `VersionConflict` (nothing written) when the version moved on, and
    `ConcurrentPlanChange` when a step or the plan row is not as read."""
    changed = [
        {name: row.get(name) for name in _CHANGED} | {"was_status": was, "was_attempts": n}
        for row, was, n in write.changed
    ]
    added = [{name: row.get(name) for name in _ADDED} for row in write.added]
    effects = [{name: row.get(name) for name in _EFFECT} | {"attempts": 0} for row in write.effects]
    effects += [
        {name: row.get(name) for name in _EFFECT}
        | {"attempts": 1, "available_at": write.lease_until}
        for row in write.claimed
    ]
    params = {
        "conversation_id": conversation_id,
        "lock_version": lock_version,
        "event_key": event_key,
        "now": now,
        "plan_id": write.plan_id,
        "changed_steps": _json(changed),
        "changed_count": len(changed),
        "added_steps": _json(added),
        "effects": _json(effects),
        "status": write.status or "",
        "version": write.version,
        "was_version": write.was_version,
        "write_plan": write.status is not None,
        "plan_count": 1 if write.status is not None else 0,
        "sent": list(write.sent),
    }
    statement = _WRITES[bool(added), bool(write.sent), bool(write.claimed)]
    try:
        (row,) = await statement.fetch(conn, params)
    except DBAPIError as exc:
        if _GUARD_FAILED in str(exc.orig):  # not str(exc): it quotes the statement, too
            raise ConcurrentPlanChange(
                f"plan {write.plan_id}: a step or the plan changed under the reconciler"
            ) from exc
        raise
    if not row["locked"]:
        raise VersionConflict(f"conversation {conversation_id}: lock version {lock_version}")
    return dict(zip(row["claimed_keys"], row["claimed_ids"], strict=True))


def _json(rows: list[dict[str, Any]]) -> str:
    return json.dumps(rows, default=_iso)


def _iso(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
