"""Run requests as their runs' leases: a granted request is the lease its holder's job
renews, ends, or loses (`storage/run_requests.py` has the queue; one table, split by
what the statements are for). The idle scheduler's grant at once is here too.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Integer,
    String,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    select,
    type_coerce,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.run_requests import requests_t
from storage.tables import Json

_others = requests_t.alias("others")
# a request's own columns, as `agents/slot_requests.py` fills them
COLUMNS = (
    "effect_key", "effect_kind", "effect", "conversation_id", "team_id", "channel_id",
    "agent_name", "plan_id", "step_index", "attempt", "priority", "estimate_tokens", "tools",
)  # fmt: skip
_GRANTED = ("run_key", "state", "holder", "lease_until", "preempt", "grants", "enqueued_at",
            "granted_at")  # fmt: skip


async def grant_at_once(
    conn: AsyncConnection,
    *,
    run_key: str,
    owner: str,
    now: datetime,
    until: datetime,
    capacity: int,
    process_capacity: int,
    agent_cap: int | None,
    **values: Any,
) -> bool:
    """The idle scheduler's fast path: the request granted to `owner` (its lease until
    `until`) as it is written, when no other run waits and the deployment's cap, the
    process's and the agent's quota have room; True when granted. A new request is one
    statement; one already there (a crashed holder's expired grant, a run asked again)
    one more. Otherwise nothing is written: the caller enqueues and an admission pass
    decides. Serialised with the passes by `lock_admission`. (Both statements are built
    once: a run's claim pays no statement construction.)"""
    params = {f"v_{name}": values[name] for name in COLUMNS} | dict(
        b_run_key=run_key, b_owner=owner, b_now=now, b_until=until, b_capacity=capacity,
        b_process_capacity=process_capacity, b_agent_cap=agent_cap,
    )  # fmt: skip
    insert, regrant = _STATEMENTS["postgresql" if conn.dialect.name == "postgresql" else "sqlite"]
    if (await conn.execute(insert, params)).rowcount:
        return True
    return bool((await conn.execute(regrant, params)).rowcount)


def _room() -> Any:
    """No other run waits, and the caps have room for one more (a grant at once)."""
    o = _others.c
    key = bindparam("b_run_key", type_=String)
    now = bindparam("b_now", type_=requests_t.c.enqueued_at.type)
    live = (o.state == "granted") & (o.lease_until > now) & (o.run_key != key)
    held = select(func.count()).select_from(_others)
    agent_cap = bindparam("b_agent_cap", type_=Integer)
    return and_(
        ~exists().where(o.state.in_(("waiting", "preempted")), o.run_key != key),
        held.where(live).scalar_subquery() < bindparam("b_capacity"),
        held.where(live, o.holder == bindparam("b_owner")).scalar_subquery()
        < bindparam("b_process_capacity"),
        agent_cap.is_(None)
        | (
            held.where(live, o.agent_name == bindparam("v_agent_name")).scalar_subquery()
            < agent_cap
        ),
    )


def _value(name: str) -> Any:
    """A request's own column as a parameter (`v_<name>`: apart from the columns's)."""
    column = requests_t.c[name]
    if name in ("effect", "tools"):
        return type_coerce(bindparam(f"v_{name}"), Json)
    return bindparam(f"v_{name}", type_=column.type)


def _statements(dialect: Any) -> tuple[Any, Any]:
    c = requests_t.c
    room = _room()
    now = bindparam("b_now", type_=c.enqueued_at.type)
    granted: tuple[Any, ...] = (
        bindparam("b_run_key"), literal("granted"), bindparam("b_owner"),
        bindparam("b_until", type_=c.lease_until.type), literal(False), literal(1), now, now,
    )  # fmt: skip
    chosen = select(*granted, *(_value(n) for n in COLUMNS)).where(room)
    insert = dialect.insert(requests_t).from_select([*_GRANTED, *COLUMNS], chosen)
    again = (c.state == "done") | ((c.state == "granted") & (c.lease_until <= now))
    regrant = (
        update(requests_t)
        .where(
            c.run_key == bindparam("b_run_key"), again | c.state.in_(("waiting", "preempted")), room
        )
        .values(
            {
                **{c[n]: _value(n) for n in COLUMNS},  # asked again: maybe new work
                c.enqueued_at: case((c.state == "done", now), else_=c.enqueued_at),
                c.state: "granted",
                c.holder: bindparam("b_owner"),
                c.lease_until: bindparam("b_until", type_=c.lease_until.type),
                c.preempt: False,
                c.grants: c.grants + 1,
                c.granted_at: now,
                c.wait_reason: None,
                c.wait_kind: None,
                c.finished_at: None,
            }
        )
    )  # fmt: skip
    return insert.on_conflict_do_nothing(), regrant


_STATEMENTS = {"postgresql": _statements(postgresql), "sqlite": _statements(sqlite)}


async def renew_request(
    conn: AsyncConnection, run_key: str, owner: str, until: datetime
) -> bool | None:
    """Extend `owner`'s grant – the run's lease – in one statement; None when it lost it
    (it expired and was granted elsewhere), else True when the run is asked to pause."""
    preempt = await conn.scalar(
        update(requests_t)
        .where(
            requests_t.c.run_key == run_key,
            requests_t.c.holder == owner,
            requests_t.c.state == "granted",
        )
        .values(lease_until=until)
        .returning(requests_t.c.preempt)
    )
    return None if preempt is None else bool(preempt)


_OTHERS_WAIT = exists().where(
    _others.c.state.in_(("waiting", "preempted"))
    | ((_others.c.state == "granted") & (_others.c.preempt.is_(True)))
)


async def finish_request(conn: AsyncConnection, run_key: str, now: datetime) -> bool:
    """The run ended (done, failed, cancelled): its slot is free. True when other runs
    wait for a slot (asked in the same statement: an idle deployment runs no pass)."""
    others = await conn.scalar(
        update(requests_t)
        .where(requests_t.c.run_key == run_key)
        .values(state="done", holder=None, lease_until=None, finished_at=now, preempt=False)
        .returning(_OTHERS_WAIT)
    )
    return bool(others)


async def holders(conn: AsyncConnection) -> dict[str, tuple[str, datetime]]:
    """Who holds each granted run (run key → holder, lease end): a scheduled run's lease."""
    rows = await conn.execute(
        select(requests_t.c.run_key, requests_t.c.holder, requests_t.c.lease_until).where(
            requests_t.c.state == "granted"
        )
    )
    return {str(key): (str(holder), until) for key, holder, until in rows}


async def asked_to_pause(conn: AsyncConnection, run_key: str) -> bool:
    """Whether a granted run was asked to pause for urgent work (read at its turn boundary,
    in the transaction that stores the turn: a run elsewhere notices within one turn)."""
    return bool(
        await conn.scalar(select(requests_t.c.preempt).where(requests_t.c.run_key == run_key))
    )


async def pass_slot(
    conn: AsyncConnection, owner: str, *, now: datetime, until: datetime, priority_at_most: int
) -> str | None:
    """A paused run's slot handed straight to the most urgent run waiting only for a slot
    (its priority at most `priority_at_most`), granted to `owner` in the pause's own
    transaction – no wait for the next admission pass. Its run key, or None."""
    c = requests_t.c
    key = await conn.scalar(
        select(c.run_key)
        .where(
            c.state.in_(("waiting", "preempted")),
            c.priority <= priority_at_most,
            c.wait_kind.is_(None) | (c.wait_kind == "capacity"),
        )
        .order_by(c.priority, c.enqueued_at, c.id)
        .limit(1)
    )
    if key is None:
        return None
    await conn.execute(
        update(requests_t)
        .where(c.run_key == key, c.state.in_(("waiting", "preempted")))
        .values(
            state="granted", holder=owner, lease_until=until, granted_at=now,
            grants=c.grants + 1, wait_reason=None, wait_kind=None, preempt=False,
        )
    )  # fmt: skip
    return str(key)
