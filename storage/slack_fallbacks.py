"""Slack features a workspace does not offer: one row per workspace and feature.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.service_tables import SlackFallback
from flotilla.storage.sql import insert_ignoring_conflict

fallbacks_t: Table = SlackFallback.__table__  # type: ignore[assignment]


async def record_fallback(
    conn: AsyncConnection, team_id: str, feature: str, error: str, now: datetime
) -> None:
    """Remember that `team_id` refused `feature` with `error` (the first refusal is kept)."""
    await conn.execute(
        insert_ignoring_conflict(
            conn, fallbacks_t, team_id=team_id, feature=feature, error=error[:80], recorded_at=now
        )
    )


async def fallbacks_of(conn: AsyncConnection, team_id: str) -> set[str]:
    """The features `team_id` does not offer."""
    rows = await conn.execute(select(fallbacks_t.c.feature).where(fallbacks_t.c.team_id == team_id))
    return {str(row[0]) for row in rows}
