"""Agents: the sub-agents an admin configured for a workspace.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Table, delete, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.records import (
    AgentRecord,
)
from flotilla.storage.sql import DuplicateError, insert_ignoring_conflict
from flotilla.storage.tables import (
    Agent,
)
from flotilla.storage.workspaces import ensure_workspace

agents_t: Table = Agent.__table__  # type: ignore[assignment]


AGENT_FIELDS = (
    "display_name",
    "icon",
    "description",
    "system_prompt",
    "model",
    "tools",
    "mcp_servers",
    "identity",
    "bot_token_encrypted",
    "bot_user_id",
    "bot_id",
    "app_id",
    "enabled",
)


def _agent(row: RowMapping) -> AgentRecord:
    return AgentRecord(**{name: row[name] for name in AgentRecord.__dataclass_fields__})


async def create_agent(
    conn: AsyncConnection, team_id: str, name: str, now: datetime, **fields: Any
) -> AgentRecord:
    """Add a sub-agent; raises DuplicateError when the name is taken in this workspace."""
    unknown = set(fields) - set(AGENT_FIELDS)
    if unknown:
        raise TypeError(f"unknown agent fields: {sorted(unknown)}")
    values = {"display_name": name, **fields}
    await ensure_workspace(conn, team_id, now)
    result = await conn.execute(
        insert_ignoring_conflict(
            conn, agents_t, team_id=team_id, name=name, created_at=now, updated_at=now, **values
        )
    )
    if not result.rowcount:
        raise DuplicateError(f"an agent named {name!r} exists already")
    agent = await get_agent(conn, team_id, name)
    assert agent is not None
    return agent


async def get_agent(conn: AsyncConnection, team_id: str, name: str) -> AgentRecord | None:
    row = (
        (
            await conn.execute(
                select(agents_t).where(agents_t.c.team_id == team_id, agents_t.c.name == name)
            )
        )
        .mappings()
        .first()
    )
    return _agent(row) if row else None


async def list_agents(
    conn: AsyncConnection, team_id: str, *, enabled_only: bool = False
) -> list[AgentRecord]:
    stmt = select(agents_t).where(agents_t.c.team_id == team_id).order_by(agents_t.c.name)
    if enabled_only:
        stmt = stmt.where(agents_t.c.enabled.is_(True))
    return [_agent(r) for r in (await conn.execute(stmt)).mappings()]


async def list_agents_with(
    conn: AsyncConnection, team_id: str, more: ColumnElement[Any]
) -> tuple[list[AgentRecord], Any]:
    """`list_agents`, and `more` (a scalar subquery of the caller's) read by the same
    statement – by one of its own when the team has no agent."""
    stmt = select(agents_t, more.label("_more")).where(agents_t.c.team_id == team_id)
    rows = list((await conn.execute(stmt.order_by(agents_t.c.name))).mappings())
    if not rows:
        return [], await conn.scalar(select(more))
    return [_agent(r) for r in rows], rows[0]["_more"]


async def update_agent(
    conn: AsyncConnection, team_id: str, name: str, now: datetime, **fields: Any
) -> AgentRecord:
    """Change an agent's configuration; raises LookupError when there is no such agent."""
    unknown = set(fields) - set(AGENT_FIELDS)
    if unknown:
        raise TypeError(f"unknown agent fields: {sorted(unknown)}")
    result = await conn.execute(
        update(agents_t)
        .where(agents_t.c.team_id == team_id, agents_t.c.name == name)
        .values(updated_at=now, **fields)
    )
    if not result.rowcount:
        raise LookupError(f"no agent named {name!r}")
    agent = await get_agent(conn, team_id, name)
    assert agent is not None
    return agent


async def remove_agent(conn: AsyncConnection, team_id: str, name: str) -> bool:
    result = await conn.execute(
        delete(agents_t).where(agents_t.c.team_id == team_id, agents_t.c.name == name)
    )
    return bool(result.rowcount)
