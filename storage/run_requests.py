"""Run requests: runs waiting for a slot, and the runs holding one (the scheduler's queue).

A request is `waiting` until an admission pass grants it; `granted` while its holder's
job runs it (its `lease_until` renewed by the job's heartbeat in the same transaction as
its run lease, so both expire together after a crash); `preempted` when it was paused for
urgent work (it waits again, keeping its place in line); `done` once its run ended (kept
a while as the memory of who was served lately, then pruned).

Every function takes an open connection; the caller owns the transaction. Admission
passes are serialised across the deployment by `lock_admission` (PostgreSQL: a
transaction-scoped advisory lock; SQLite: the write transaction is the lock already).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Table,
    bindparam,
    delete,
    func,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.records import RunRequestRecord
from flotilla.storage.service_tables import RunRequestRow
from flotilla.storage.sql import insert_ignoring_conflict

requests_t: Table = RunRequestRow.__table__  # type: ignore[assignment]
ADMISSION_LOCK = 0x466C6F5363686564  # "FloSched": the one admission pass at a time
QUEUED = ("waiting", "granted", "preempted")


async def lock_admission(conn: AsyncConnection) -> None:
    """Serialise admission passes across processes until this transaction ends."""
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADMISSION_LOCK})


async def enqueue_request(
    conn: AsyncConnection,
    *,
    run_key: str,
    now: datetime,
    owner: str | None = None,
    **values: Any,
) -> str:
    """Ask for a slot for `run_key` (idempotent); the request's state afterwards
    ("granted_here": granted to `owner` already, by a pass a moment ago).

    A request already there keeps its place in line. One granted to a holder whose lease
    expired (the process died), or one that ended but whose work is asked for again,
    waits again."""
    await conn.execute(
        insert_ignoring_conflict(
            conn,
            requests_t,
            run_key=run_key,
            state="waiting",
            preempt=False,
            grants=0,
            enqueued_at=now,
            **values,
        )
    )
    again = dict(state="waiting", holder=None, lease_until=None, preempt=False, finished_at=None)
    # a run that ended asked again is new work of the same run (a blocked step resumed)
    await conn.execute(
        update(requests_t)
        .where(requests_t.c.run_key == run_key, requests_t.c.state == "done")
        .values(**again, **values, enqueued_at=now, wait_reason=None, wait_kind=None)
    )
    await conn.execute(
        update(requests_t)
        .where(
            requests_t.c.run_key == run_key,
            requests_t.c.state == "granted",
            requests_t.c.lease_until <= now,
        )
        .values(**again)
    )
    state, holder = (
        await conn.execute(
            select(requests_t.c.state, requests_t.c.holder).where(requests_t.c.run_key == run_key)
        )
    ).one()
    return "granted_here" if state == "granted" and owner and holder == owner else str(state)


async def queued_requests(conn: AsyncConnection) -> list[RunRequestRecord]:
    """Every request waiting, granted or preempted, oldest first."""
    rows = await conn.execute(
        select(requests_t)
        .where(requests_t.c.state.in_(QUEUED))
        .order_by(requests_t.c.enqueued_at, requests_t.c.id)
    )
    return [_record(row) for row in rows.mappings()]


async def get_request(conn: AsyncConnection, run_key: str) -> RunRequestRecord | None:
    row = (
        (await conn.execute(select(requests_t).where(requests_t.c.run_key == run_key)))
        .mappings()
        .first()
    )
    return _record(row) if row is not None else None


async def expire_grants(conn: AsyncConnection, now: datetime) -> list[str]:
    """Granted requests whose holder stopped renewing (a killed process) wait again,
    keeping their place; their run keys."""
    keys = list(
        await conn.scalars(
            select(requests_t.c.run_key).where(
                requests_t.c.state == "granted", requests_t.c.lease_until <= now
            )
        )
    )
    if keys:
        await conn.execute(
            update(requests_t)
            .where(requests_t.c.run_key.in_(keys))
            .values(state="waiting", holder=None, lease_until=None, preempt=False)
        )
    return keys


async def grant_request(
    conn: AsyncConnection, run_key: str, owner: str, *, now: datetime, until: datetime
) -> bool:
    """Grant a waiting request to `owner` (its lease until `until`); False when it was not
    waiting any more. A granted request is its run's lease (see `renew_request`)."""
    result = await conn.execute(
        update(requests_t)
        .where(requests_t.c.run_key == run_key, requests_t.c.state.in_(("waiting", "preempted")))
        .values(
            state="granted",
            holder=owner,
            lease_until=until,
            granted_at=now,
            grants=requests_t.c.grants + 1,
            wait_reason=None,
            wait_kind=None,
            preempt=False,
        )
    )
    return bool(result.rowcount)


_SET_WAIT = (  # only while it waits: a run at a boundary may have handed it a slot since
    update(requests_t)
    .where(
        requests_t.c.run_key == bindparam("key"),
        (requests_t.c.state == "waiting") | (requests_t.c.state == "preempted"),
    )
    .values(wait_kind=bindparam("kind"), wait_reason=bindparam("reason"))
)


async def set_wait_reasons(conn: AsyncConnection, waits: list[tuple[str, str, str]]) -> None:
    """Why each of these runs waits (run key, kind, sentence), in one statement: a pass
    moves every place in line at once."""
    if waits:
        rows = [{"key": key, "kind": kind, "reason": reason[:200]} for key, kind, reason in waits]
        await conn.execute(_SET_WAIT, rows)


async def requeue_request(
    conn: AsyncConnection, run_key: str, owner: str, *, preempted: bool = False
) -> None:
    """A holder gives its slot back with the run unfinished: it waits again in its place
    (`preempted`: paused for urgent work, and said so)."""
    values: dict[str, Any] = dict(
        state="preempted" if preempted else "waiting", holder=None, lease_until=None, preempt=False
    )
    if preempted:
        values |= dict(wait_kind="preempted", wait_reason="paused for urgent work")
    await conn.execute(
        update(requests_t)
        .where(requests_t.c.run_key == run_key, requests_t.c.holder == owner)
        .values(**values)
    )


async def requeue_requests_of(conn: AsyncConnection, owner: str) -> None:
    """A stopping process gives every slot it holds back."""
    await conn.execute(
        update(requests_t)
        .where(requests_t.c.holder == owner, requests_t.c.state == "granted")
        .values(state="waiting", holder=None, lease_until=None, preempt=False)
    )


async def drop_request(conn: AsyncConnection, run_key: str) -> None:
    """Forget a request (its work is tried again later and asks anew, or it was refused)."""
    await conn.execute(delete(requests_t).where(requests_t.c.run_key == run_key))


async def served_since(conn: AsyncConnection, since: datetime) -> Counter[str]:
    """Runs granted per tenant (`team:channel`) since a moment: recent shares."""
    rows = await conn.execute(
        select(requests_t.c.team_id, requests_t.c.channel_id, func.count())
        .where(requests_t.c.granted_at >= since)
        .group_by(requests_t.c.team_id, requests_t.c.channel_id)
    )
    return Counter({f"{team}:{channel}": int(n) for team, channel, n in rows})


async def prune_requests(conn: AsyncConnection, before: datetime) -> int:
    """Drop ended requests that finished before `before`; how many."""
    result = await conn.execute(
        delete(requests_t).where(requests_t.c.state == "done", requests_t.c.finished_at < before)
    )
    return int(result.rowcount or 0)


def wait_reasons(conn: Connection, plan_id: int) -> dict[int, str]:
    """Why each of a plan's steps still waits for a slot (step index → sentence), inside a
    synchronous unit of work (the card's plan load)."""
    rows = conn.execute(
        select(requests_t.c.step_index, requests_t.c.wait_reason).where(
            requests_t.c.plan_id == plan_id,
            requests_t.c.state.in_(("waiting", "preempted")),
            requests_t.c.wait_reason.is_not(None),
            requests_t.c.step_index.is_not(None),
        )
    )
    return {int(step): str(reason) for step, reason in rows}


def _record(row: Any) -> RunRequestRecord:
    return RunRequestRecord(
        run_key=row["run_key"],
        effect_key=row["effect_key"],
        effect_kind=row["effect_kind"],
        effect=dict(row["effect"] or {}),
        conversation_id=row["conversation_id"],
        team_id=row["team_id"],
        channel_id=row["channel_id"],
        agent_name=row["agent_name"],
        plan_id=row["plan_id"],
        step_index=row["step_index"],
        attempt=row["attempt"],
        priority=row["priority"],
        estimate_tokens=row["estimate_tokens"],
        tools=list(row["tools"] or []),
        state=row["state"],
        wait_reason=row["wait_reason"],
        wait_kind=row["wait_kind"],
        holder=row["holder"],
        lease_until=row["lease_until"],
        preempt=bool(row["preempt"]),
        grants=row["grants"],
        enqueued_at=row["enqueued_at"],
        granted_at=row["granted_at"],
    )


async def reprioritize(
    conn: AsyncConnection,
    priority: int,
    *,
    team_id: str,
    plan_id: int | None = None,
    channel_id: str | None = None,
) -> int:
    """Give the waiting runs of a plan (or of a channel) a new priority; how many."""
    query = update(requests_t).where(
        requests_t.c.team_id == team_id, requests_t.c.state.in_(("waiting", "preempted"))
    )
    if plan_id is not None:
        query = query.where(requests_t.c.plan_id == plan_id)
    if channel_id is not None:
        query = query.where(requests_t.c.channel_id == channel_id)
    result = await conn.execute(query.values(priority=priority))
    return int(result.rowcount or 0)
