"""The usage ledger: tokens spent per workspace, channel, plan, step, agent and model.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, func, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.records import (
    UsageTotal,
)
from flotilla.storage.service_tables import (
    UsageEntry,
)

usage_t: Table = UsageEntry.__table__  # type: ignore[assignment]


async def record_usage(conn: AsyncConnection, **entry: Any) -> None:
    """Tokens a run spent, as one ledger row (`usage_insert`'s arguments)."""
    await conn.execute(usage_insert(**entry))


def usage_insert(
    *,
    team_id: str,
    agent_name: str,
    model: str,
    input_tokens: int,
    output_tokens: int,
    now: datetime,
    channel_id: str | None = None,
    plan_id: int | None = None,
    step_index: int | None = None,
) -> Any:
    """`record_usage`'s statement, for a caller's connection of either kind."""
    return insert(usage_t).values(
        team_id=team_id,
        channel_id=channel_id,
        plan_id=plan_id,
        step_index=step_index,
        agent_name=agent_name,
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        created_at=now,
    )


async def usage_since(
    conn: AsyncConnection, team_id: str, since: datetime, *, by: str = "agent_name"
) -> list[UsageTotal]:
    """Token totals per agent (or per `channel_id`, `model`) since a moment, largest first."""
    if by not in ("agent_name", "channel_id", "model"):
        raise ValueError(f"cannot group usage by {by!r}")
    key = usage_t.c[by]
    total_in = func.sum(usage_t.c.input_tokens)
    total_out = func.sum(usage_t.c.output_tokens)
    rows = await conn.execute(
        select(key, total_in, total_out)
        .where(usage_t.c.team_id == team_id, usage_t.c.created_at >= since)
        .group_by(key)
        .order_by((total_in + total_out).desc())
    )
    return [UsageTotal(key=str(k), input_tokens=int(i), output_tokens=int(o)) for k, i, o in rows]


async def tokens_spent(
    conn: AsyncConnection, team_id: str, since: datetime, *, channel_id: str | None = None
) -> int:
    """Tokens (input and output) a workspace – or one of its channels – spent since a moment."""
    query = select(func.sum(usage_t.c.input_tokens + usage_t.c.output_tokens)).where(
        usage_t.c.team_id == team_id, usage_t.c.created_at >= since
    )
    if channel_id is not None:
        query = query.where(usage_t.c.channel_id == channel_id)
    return int(await conn.scalar(query) or 0)
