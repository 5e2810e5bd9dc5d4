"""Run requests as their runs' leases: a granted request is the lease its holder's job
renews, ends, or loses (`storage/run_requests.py` has the queue; one table, split by
what the statements are for). The idle scheduler's grant at once is here too.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
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
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.run_requests import requests_t, requeue_request
from flotilla.storage.tables import Json

_others = requests_t.alias("others")


def _waits(state: Any) -> Any:
    """A request waits (or waits again, paused). Not `IN (…)`: an IN list of literals is an
    expanding parameter, rendered into the SQL again at every execution."""
    return (state == "waiting") | (state == "preempted")


# a request's own columns, as `agents/running/slot_requests.py` fills them
COLUMNS = (
    "effect_key",
    "effect_kind",
    "effect",
    "conversation_id",
    "team_id",
    "channel_id",
    "agent_name",
    "plan_id",
    "step_index",
    "attempt",
    "priority",
    "estimate_tokens",
    "tools",
)
_GRANTED = (
    "run_key",
    "state",
    "holder",
    "lease_until",
    "preempt",
    "grants",
    "enqueued_at",
    "granted_at",
)


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
        b_run_key=run_key,
        b_owner=owner,
        b_now=now,
        b_until=until,
        b_capacity=capacity,
        b_process_capacity=process_capacity,
        b_agent_cap=agent_cap,
    )
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
        ~exists().where(_waits(o.state), o.run_key != key),
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
        bindparam("b_run_key"),
        literal("granted"),
        bindparam("b_owner"),
        bindparam("b_until", type_=c.lease_until.type),
        literal(False),
        literal(1),
        now,
        now,
    )
    chosen = select(*granted, *(_value(n) for n in COLUMNS)).where(room)
    insert = dialect.insert(requests_t).from_select([*_GRANTED, *COLUMNS], chosen)
    again = (c.state == "done") | ((c.state == "granted") & (c.lease_until <= now))
    regrant = (
        update(requests_t)
        .where(c.run_key == bindparam("b_run_key"), again | _waits(c.state), room)
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
    )
    return insert.on_conflict_do_nothing(), regrant


_STATEMENTS = {"postgresql": _statements(postgresql), "sqlite": _statements(sqlite)}


async def renew_request(conn: AsyncConnection, run_key: str, owner: str, until: datetime) -> bool:
    """Extend `owner`'s grant – the run's lease – in one statement; False when it lost it
    (it expired and was granted elsewhere, or the run gave its slot away)."""
    renewed = await conn.scalar(
        update(requests_t)
        .where(
            requests_t.c.run_key == run_key,
            requests_t.c.holder == owner,
            requests_t.c.state == "granted",
        )
        .values(lease_until=until)
        .returning(requests_t.c.id)
    )
    return renewed is not None


_FINISH = (  # built once: a run's settle pays no statement construction
    update(requests_t)
    .where(requests_t.c.run_key == bindparam("b_key", type_=String))
    .values(
        state="done",
        holder=None,
        lease_until=None,
        preempt=False,
        finished_at=bindparam("b_now", type_=requests_t.c.finished_at.type),
    )
    .returning(exists().where(_waits(_others.c.state)))
)


_FINISH_HELD = _FINISH.where(  # `_FINISH` while the owner still holds the grant
    requests_t.c.holder == bindparam("b_owner", type_=String), requests_t.c.state == "granted"
)


def finish_held_request(conn: Connection, run_key: str, owner: str, now: datetime) -> bool | None:
    """`finish_request` in a caller's synchronous transaction (the outcome's reconcile),
    only while `owner` holds the run's grant: None when it does not (nothing written)."""
    row = conn.execute(_FINISH_HELD, {"b_key": run_key, "b_owner": owner, "b_now": now}).first()
    return None if row is None else bool(row[0])


async def finish_request(conn: AsyncConnection, run_key: str, now: datetime) -> bool:
    """The run ended (done, failed, cancelled): its slot is free. True when other runs
    wait for a slot (asked in the same statement: an idle deployment runs no pass)."""
    return bool(await conn.scalar(_FINISH, {"b_key": run_key, "b_now": now}))


async def holders(conn: AsyncConnection) -> dict[str, tuple[str, datetime]]:
    """Who holds each granted run (run key → holder, lease end): a scheduled run's lease."""
    rows = await conn.execute(
        select(requests_t.c.run_key, requests_t.c.holder, requests_t.c.lease_until).where(
            requests_t.c.state == "granted"
        )
    )
    return {str(key): (str(holder), until) for key, holder, until in rows}


def _for_a_slot(table: Any, priority_at_most: Any) -> Any:
    """Requests waiting only for a slot, this urgent: an admission pass found no agent
    quota, tool quota, budget or pause keeping them (`capacity`). One no pass has looked at
    yet (no kind) may be held by a quota: its queueing woke a pass, which says."""
    t = table.c
    return and_(_waits(t.state), t.priority <= priority_at_most, t.wait_kind == "capacity")


async def urgent_waits(
    conn: AsyncConnection, run_key: str, *, priority_at_most: int, yields_from: int
) -> bool:
    """Whether this granted run (its priority at least `yields_from`) may give its slot to
    an urgent run (priority at most `priority_at_most`, more urgent than it) waiting only
    for a slot. One statement, read in the transaction that stores a model turn (so a run
    that stores turns pays nothing more for it); `give_way` then hands the slot over."""
    params = dict(b_key=run_key, b_at_most=priority_at_most, b_from=yields_from)
    return bool(await conn.scalar(_URGENT_WAITS, params))


def _urgent_waits() -> Any:
    me = requests_t.c
    waiter = exists().where(
        _for_a_slot(_others, bindparam("b_at_most", type_=Integer)),
        _others.c.priority < me.priority,
    )
    return select(waiter).where(
        me.run_key == bindparam("b_key", type_=String),
        me.state == "granted",
        me.priority >= bindparam("b_from", type_=Integer),
    )


_URGENT_WAITS = _urgent_waits()  # built once: a stored turn pays no statement construction


def urgent_waits_asked(
    run_key: str, *, priority_at_most: int, yields_from: int
) -> ColumnElement[Any]:
    """`urgent_waits` as a scalar subquery, for the statement that stores a run's turn to
    return (`storage.runs.save_run(asking=…)`): the same question, no statement of its own
    (NULL – no – when the run holds no grant)."""
    asked: ColumnElement[Any] = _URGENT_WAITS.params(
        b_key=run_key, b_at_most=priority_at_most, b_from=yields_from
    ).scalar_subquery()
    return asked


_chosen = requests_t.alias("chosen")


async def pass_slot(
    conn: AsyncConnection,
    owner: str,
    *,
    now: datetime,
    until: datetime,
    priority_at_most: int,
    from_run: str | None = None,
) -> str | None:
    """A slot handed straight to the most urgent run waiting only for a slot (its priority
    at most `priority_at_most`), granted to `owner` in the caller's transaction – no wait
    for the next admission pass. Its run key, or None (nothing written).

    One conditional statement, so two runs handing over at once never both hand to the
    same waiter: on SQLite write transactions are serialised; on PostgreSQL the waiter's
    row is locked by the subquery and a concurrent hand-over skips it (`SKIP LOCKED`),
    taking the next waiter or none. With `from_run`, only while `owner` still holds that
    run's grant (a run whose lease was lost hands nothing over)."""
    c, w = requests_t.c, _chosen.c
    chosen = (
        select(w.run_key)
        .where(_for_a_slot(_chosen, priority_at_most))
        .order_by(w.priority, w.enqueued_at, w.id)
        .limit(1)
    )
    if conn.dialect.name == "postgresql":
        chosen = chosen.with_for_update(skip_locked=True)
    conditions = [c.run_key == chosen.scalar_subquery(), _waits(c.state)]
    if from_run is not None:
        o = _others.c
        conditions.append(
            exists().where(o.run_key == from_run, o.holder == owner, o.state == "granted")
        )
    key = await conn.scalar(
        update(requests_t)
        .where(*conditions)
        .values(
            state="granted",
            holder=owner,
            lease_until=until,
            granted_at=now,
            grants=c.grants + 1,
            wait_reason=None,
            wait_kind=None,
            preempt=False,
        )
        .returning(c.run_key)
    )
    return None if key is None else str(key)


async def give_way(
    conn: AsyncConnection,
    run_key: str,
    owner: str,
    *,
    now: datetime,
    until: datetime,
    priority_at_most: int,
) -> str | None:
    """A run at a model-turn boundary yields: its slot handed to the most urgent run
    waiting only for a slot (`pass_slot`, only while `owner` still holds `run_key`), and
    it waits again in its place, paused – both or nothing, in the caller's transaction.
    The run key that received the slot, or None: nobody did, and the run goes on."""
    key = await pass_slot(
        conn, owner, now=now, until=until, priority_at_most=priority_at_most, from_run=run_key
    )
    if key is not None:
        await requeue_request(conn, run_key, owner, preempted=True)
    return key
