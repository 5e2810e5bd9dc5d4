"""Feedback on answers: a person's 👍 or 👎 per message, with its plan, step and agent.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Table, case, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.records import FeedbackTotal
from flotilla.storage.service_tables import Feedback
from flotilla.storage.sql import insert_ignoring_conflict

feedback_t: Table = Feedback.__table__  # type: ignore[assignment]
VERDICTS = ("good", "bad")


async def record_feedback(
    conn: AsyncConnection,
    *,
    team_id: str,
    channel_id: str,
    message_ts: str,
    user_id: str,
    plan_id: int,
    step_index: int,
    agent_name: str,
    verdict: str,
    now: datetime,
) -> bool:
    """Keep `user_id`'s verdict on the message (a later click replaces it); True when it
    changed what was stored."""
    if verdict not in VERDICTS:
        raise ValueError(f"unknown verdict {verdict!r}")
    inserted = await conn.execute(
        insert_ignoring_conflict(
            conn,
            feedback_t,
            team_id=team_id,
            channel_id=channel_id,
            message_ts=message_ts,
            user_id=user_id,
            plan_id=plan_id,
            step_index=step_index,
            agent_name=agent_name,
            verdict=verdict,
            created_at=now,
        )
    )
    if inserted.rowcount:
        return True
    changed = await conn.execute(
        update(feedback_t)
        .where(
            feedback_t.c.team_id == team_id,
            feedback_t.c.channel_id == channel_id,
            feedback_t.c.message_ts == message_ts,
            feedback_t.c.user_id == user_id,
            feedback_t.c.verdict != verdict,
        )
        .values(verdict=verdict, created_at=now)
    )
    return bool(changed.rowcount)


async def feedback_since(
    conn: AsyncConnection, team_id: str, since: datetime
) -> list[FeedbackTotal]:
    """👍 and 👎 per agent given since `since`, most feedback first."""
    good = func.sum(case((feedback_t.c.verdict == "good", 1), else_=0))
    bad = func.sum(case((feedback_t.c.verdict == "bad", 1), else_=0))
    rows = await conn.execute(
        select(feedback_t.c.agent_name, good.label("good"), bad.label("bad"))
        .where(feedback_t.c.team_id == team_id, feedback_t.c.created_at >= since)
        .group_by(feedback_t.c.agent_name)
        .order_by((good + bad).desc(), feedback_t.c.agent_name)
    )
    return [FeedbackTotal(str(r.agent_name), int(r.good or 0), int(r.bad or 0)) for r in rows]


async def feedback_of_plan(conn: AsyncConnection, plan_id: int) -> list[tuple[int, str, str, str]]:
    """(step, agent, user, verdict) of every feedback on a plan's answers."""
    rows = await conn.execute(
        select(
            feedback_t.c.step_index,
            feedback_t.c.agent_name,
            feedback_t.c.user_id,
            feedback_t.c.verdict,
        )
        .where(feedback_t.c.plan_id == plan_id)
        .order_by(feedback_t.c.id)
    )
    return [(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]
