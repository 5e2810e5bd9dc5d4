"""Run requests as their runs' leases: a granted request is the lease its holder's job
renews, ends, or loses (`storage/run_requests.py` has the queue; one table, split by
what the statements are for). The idle scheduler's grant at once is here too.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, case, exists, func, literal, select, type_coerce, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.run_requests import requests_t
from storage.tables import Json


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
    decides. Serialised with the passes by `lock_admission`."""
    room = _room(run_key, now, owner, capacity, process_capacity, agent_cap, values)
    row: dict[str, Any] = dict(
        values,
        run_key=run_key,
        state="granted",
        holder=owner,
        lease_until=until,
        preempt=False,
        grants=1,
        enqueued_at=now,
        granted_at=now,
    )
    columns = list(row)
    chosen = select(
        *(
            type_coerce(row[c], Json)
            if c in ("effect", "tools")
            else literal(row[c], requests_t.c[c].type)
            for c in columns
        )
    ).where(room)
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(requests_t).from_select(columns, chosen).on_conflict_do_nothing()
    if (await conn.execute(stmt)).rowcount:
        return True
    c = requests_t.c
    again = (c.state == "done") | ((c.state == "granted") & (c.lease_until <= now))
    result = await conn.execute(
        update(requests_t)
        .where(c.run_key == run_key, again | c.state.in_(("waiting", "preempted")), room)
        .values(
            **values,  # a run asked again may be new work of the same run (a resumed step)
            enqueued_at=case((c.state == "done", now), else_=c.enqueued_at),
            state="granted",
            holder=owner,
            lease_until=until,
            preempt=False,
            grants=c.grants + 1,
            granted_at=now,
            wait_reason=None,
            wait_kind=None,
            finished_at=None,
        )
    )
    return bool(result.rowcount)


_others = requests_t.alias("others")


def _room(
    run_key: str,
    now: datetime,
    owner: str,
    capacity: int,
    process_capacity: int,
    agent_cap: int | None,
    values: dict[str, Any],
) -> Any:
    """No other run waits, and the caps have room for one more (a grant at once)."""
    o = _others.c
    live = (o.state == "granted") & (o.lease_until > now) & (o.run_key != run_key)
    held = select(func.count()).select_from(_others)
    room = [
        ~exists().where(o.state.in_(("waiting", "preempted")), o.run_key != run_key),
        held.where(live).scalar_subquery() < capacity,
        held.where(live, o.holder == owner).scalar_subquery() < process_capacity,
    ]
    if agent_cap is not None:
        agent = values["agent_name"]
        room.append(held.where(live, o.agent_name == agent).scalar_subquery() < agent_cap)
    return and_(*room)


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
