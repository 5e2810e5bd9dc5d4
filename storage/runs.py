"""Agent runs (crash-safe sessions of one step attempt) and their leases.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, ScalarSelect, Table, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.records import (
    AgentRunRecord,
)
from flotilla.storage.tables import (
    AgentRun,
    RunLease,
)

runs_t: Table = AgentRun.__table__  # type: ignore[assignment]
leases_t: Table = RunLease.__table__  # type: ignore[assignment]


async def save_run(
    conn: AsyncConnection,
    *,
    asking: ColumnElement[Any] | None = None,
    **run: Any,
) -> Any:
    """Store a run's message history (after every model turn) and its status: one
    statement, inserting the run's row the first time (`save_run_statement`). `asking`: a
    question (a scalar subquery) the same statement answers, returned (else None)."""
    stmt = save_run_statement(conn.dialect.name, **run)
    if asking is None:
        await conn.execute(stmt)
        return None
    return await conn.scalar(stmt.returning(asking))


def save_run_statement(
    dialect_name: str,
    *,
    run_key: str,
    agent_name: str,
    model: str,
    status: str,
    messages: list[Any],
    now: datetime,
    conversation_id: int | None = None,
    plan_id: int | None = None,
    step_index: int | None = None,
    input_tokens: int = 0,
    output_tokens: int = 0,
) -> Any:
    """`save_run`'s statement, for a caller's connection of either kind (a run's close in
    the transaction of its plan's change)."""
    values = dict(
        agent_name=agent_name,
        model=model,
        status=status,
        messages=messages,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        updated_at=now,
    )
    dialect = postgresql if dialect_name == "postgresql" else sqlite
    stmt = dialect.insert(runs_t).values(
        run_key=run_key,
        conversation_id=conversation_id,
        plan_id=plan_id,
        step_index=step_index,
        created_at=now,
        **values,
    )
    return stmt.on_conflict_do_update(index_elements=[runs_t.c.run_key], set_=values)


async def load_run(conn: AsyncConnection, run_key: str) -> AgentRunRecord | None:
    row = (await conn.execute(select(runs_t).where(runs_t.c.run_key == run_key))).mappings().first()
    if row is None:
        return None
    return AgentRunRecord(
        run_key=row["run_key"],
        agent_name=row["agent_name"],
        model=row["model"],
        status=row["status"],
        messages=list(row["messages"]),
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
    )


async def claim_run(
    conn: AsyncConnection, run_key: str, owner: str, *, now: datetime, until: datetime
) -> bool:
    """Take (or keep) the lease on a run: True when `owner` may run it until `until`.

    Free, expired, or already `owner`'s: claimed. Held by another owner and not expired:
    refused, so two replicas never run the same step at once.
    """
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = dialect.insert(leases_t).values(run_key=run_key, owner=owner, lease_until=until)
    stmt = stmt.on_conflict_do_update(
        index_elements=[leases_t.c.run_key],
        set_={"owner": owner, "lease_until": until},
        where=(leases_t.c.lease_until <= now) | (leases_t.c.owner == owner),
    )
    return bool((await conn.execute(stmt)).rowcount)


async def renew_run(conn: AsyncConnection, run_key: str, owner: str, until: datetime) -> bool:
    """Extend `owner`'s lease; False when it lost the lease (it expired and was taken)."""
    result = await conn.execute(
        update(leases_t)
        .where(leases_t.c.run_key == run_key, leases_t.c.owner == owner)
        .values(lease_until=until)
    )
    return bool(result.rowcount)


async def release_run(conn: AsyncConnection, run_key: str, owner: str) -> None:
    await conn.execute(
        delete(leases_t).where(leases_t.c.run_key == run_key, leases_t.c.owner == owner)
    )


async def run_lease_until(conn: AsyncConnection, run_key: str) -> datetime | None:
    """When the lease on a run ends (None: nobody holds it)."""
    until: datetime | None = await conn.scalar(
        select(leases_t.c.lease_until).where(leases_t.c.run_key == run_key)
    )
    return until


async def release_runs_of(conn: AsyncConnection, owner: str) -> None:
    """Release every lease `owner` holds (a process handing its work over as it stops)."""
    await conn.execute(delete(leases_t).where(leases_t.c.owner == owner))


def typical_run_tokens_of(agent_name: str, *, last: int = 20) -> ScalarSelect[Any]:
    """The mean tokens of an agent's last finished runs (NULL when it has none): an
    estimate, as a scalar subquery for a caller's statement that reads more with it."""
    recent = (
        select((runs_t.c.input_tokens + runs_t.c.output_tokens).label("tokens"))
        .where(runs_t.c.agent_name == agent_name, runs_t.c.status == "finished")
        .order_by(runs_t.c.id.desc())
        .limit(last)
        .subquery()
    )
    return select(func.avg(recent.c.tokens)).scalar_subquery()
