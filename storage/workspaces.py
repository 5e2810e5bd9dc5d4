"""Workspaces: one row per Slack workspace Flotilla has seen, and its settings.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, ScalarSelect, Table, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.sql import insert_ignoring_conflict
from flotilla.storage.tables import (
    Workspace,
)

workspaces_t: Table = Workspace.__table__  # type: ignore[assignment]


async def ensure_workspace(
    conn: AsyncConnection, team_id: str, now: datetime, name: str = ""
) -> bool:
    """Create the workspace row on first contact (True); an existing one is left as it is."""
    stmt = insert_ignoring_conflict(
        conn, workspaces_t, team_id=team_id, name=name, settings={}, created_at=now
    )
    return bool((await conn.execute(stmt)).rowcount)


async def workspace_default_model(conn: AsyncConnection, team_id: str) -> str | None:
    row = await conn.scalar(select(default_model_of(team_id)))
    return row


def default_model_of(team_id: str) -> ScalarSelect[Any]:
    """The workspace's default model as a scalar subquery (for a caller's statement)."""
    own = select(workspaces_t.c.default_model).where(workspaces_t.c.team_id == team_id)
    return own.scalar_subquery()


async def set_workspace_default_model(
    conn: AsyncConnection, team_id: str, model: str | None
) -> None:
    await conn.execute(
        update(workspaces_t).where(workspaces_t.c.team_id == team_id).values(default_model=model)
    )


async def workspace_settings(conn: AsyncConnection, team_id: str) -> dict[str, Any]:
    """A workspace's stored overrides (admins' changes), `{}` when none."""
    found = await conn.scalar(
        select(workspaces_t.c.settings).where(workspaces_t.c.team_id == team_id)
    )
    return dict(found or {})


async def workspace_settings_and(
    conn: AsyncConnection, team_id: str, *more: ColumnElement[Any]
) -> list[Any]:
    """`workspace_settings`, then each of `more` (scalar subqueries of the caller's), read
    by one statement."""
    own = select(workspaces_t.c.settings).where(workspaces_t.c.team_id == team_id)
    row = (await conn.execute(select(own.scalar_subquery(), *more))).one()
    return [dict(row[0] or {}), *row[1:]]


async def set_workspace_settings(
    conn: AsyncConnection, team_id: str, settings: dict[str, Any]
) -> None:
    await conn.execute(
        update(workspaces_t).where(workspaces_t.c.team_id == team_id).values(settings=settings)
    )
