"""A conversation's plans: the reconciler's load of a plan with its steps, the plan row's
writes, the plan card, and plans as the admin surface lists them.

Rows go in and out as plain dicts (the domain models live in `agents/`). The reconciler's
functions are synchronous, over a `Connection`: the reconciler runs a whole transaction as
one function (`ConversationLocks.run`), which on SQLite is one hop to a worker thread
instead of one hop per statement (bench/README.md, "reconcile.py", says what it saves).
Every write is guarded by what the reconciler read: the plan row only
`WHERE version = :was`, a step row only `WHERE status = :was AND attempts = :was_attempts`
(`storage/plan_steps.py`), and
dispatch effects go to the outbox under a unique idempotency key. A write that finds the
data changed under it raises, so the whole transaction rolls back: the lock removes
contention, the data makes the guarantee.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    String,
    Table,
    and_,
    bindparam,
    case,
    cast,
    exists,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.conversations import conversations_t
from flotilla.storage.outbox import outbox_t
from flotilla.storage.plan_steps import STEP_FIELDS, steps_t
from flotilla.storage.prepared import Prepared
from flotilla.storage.sql import ConcurrentPlanChange
from flotilla.storage.tables import Plan

plans_t: Table = Plan.__table__  # type: ignore[assignment]

CARD_KIND = "update_plan_card"


def plan_query(where: Any, *, unless_known: bool = False, card_of: Any = None) -> Any:
    """Plan columns, whether a card refresh is waiting, and the steps (one row each).

    With `unless_known`, the steps are left out when the plan is still at the version the
    caller already holds (`known_id`, `known_version`): one statement either way.
    `card_of` = (conversation id, plan id) as expressions that do not refer to the row (a
    parameter, an uncorrelated subquery): the card check is then evaluated once per
    statement (PostgreSQL: an InitPlan) instead of once per step row.
    """
    joined = steps_t.c.plan_id == plans_t.c.id
    if unless_known:
        # the steps' key is NULL for a plan held at its version: the index lookup finds no
        # step at all (a condition beside the key was checked on each of the plan's steps)
        held = and_(
            plans_t.c.id == bindparam("known_id"),
            plans_t.c.version == bindparam("known_version"),
        )
        joined = steps_t.c.plan_id == case((held, null()), else_=plans_t.c.id)
    card_conversation, card_plan = card_of or (plans_t.c.conversation_id, plans_t.c.id)
    card_prefix = literal("plan:") + cast(card_plan, String) + literal(":card:%")
    card_waiting = (
        exists()
        .where(
            outbox_t.c.conversation_id == card_conversation,
            outbox_t.c.kind == CARD_KIND,
            outbox_t.c.state == "pending",
            outbox_t.c.attempts == 0,
            outbox_t.c.idempotency_key.like(card_prefix),
        )
        .label("plan_card_waiting")
    )
    return (
        select(
            plans_t.c.id.label("plan_id"),
            plans_t.c.conversation_id.label("plan_conversation_id"),
            plans_t.c.status.label("plan_status"),
            plans_t.c.max_parallel.label("plan_max_parallel"),
            plans_t.c.max_attempts.label("plan_max_attempts"),
            plans_t.c.version.label("plan_version"),
            conversations_t.c.request_text.label("plan_request"),
            card_waiting,
            steps_t.c.index,
            *(steps_t.c[name] for name in STEP_FIELDS),
        )
        .select_from(
            plans_t.join(
                conversations_t, conversations_t.c.id == plans_t.c.conversation_id
            ).outerjoin(steps_t, joined)
        )
        .where(where)
        .order_by(steps_t.c.index)
    )


_LATEST = select(func.max(plans_t.c.id)).where(
    plans_t.c.conversation_id == bindparam("conversation_id")
)
_LATEST_ID = _LATEST.scalar_subquery()
# the card check refers to no column of the row: evaluated once, not once per step row
_LOAD_LATEST = plan_query(
    plans_t.c.id == _LATEST_ID,
    unless_known=True,
    card_of=(bindparam("conversation_id"), _LATEST_ID),
)
_LOAD_BY_ID = plan_query(plans_t.c.id == bindparam("plan_id"))
_LOAD_LATEST_PREPARED = Prepared(_LOAD_LATEST)


@dataclass(frozen=True, slots=True)
class LoadedPlan:
    """A stored plan: its columns, its step rows (None: unchanged since the known
    version), and whether a card refresh for it is waiting, unclaimed, in the outbox."""

    plan: dict[str, Any]
    steps: list[dict[str, Any]] | None
    card_waiting: bool


def loaded_plan(rows: Sequence[Any], known_version: int | None = None) -> LoadedPlan | None:
    if not rows:
        return None
    first = rows[0]
    plan = {
        "id": first["plan_id"],
        "conversation_id": first["plan_conversation_id"],
        "status": first["plan_status"],
        "max_parallel": first["plan_max_parallel"],
        "max_transient_failures": first["plan_max_attempts"],
        "version": first["plan_version"],
        "request": first["plan_request"],
    }
    steps = [r if type(r) is dict else dict(r) for r in rows if r["index"] is not None]
    unchanged = not steps and known_version == plan["version"]
    return LoadedPlan(plan, None if unchanged else steps, bool(first["plan_card_waiting"]))


def load_latest_plan(
    conn: Connection, conversation_id: int, *, known: tuple[int, int] | None = None
) -> LoadedPlan | None:
    """The conversation's newest plan and its steps (by index), in one statement.

    `known` = (plan id, version) the caller holds in memory: if the plan is still at that
    version its steps are not sent again (`steps` is None).
    """
    known_id, known_version = known if known is not None else (-1, -1)
    params = {
        "conversation_id": conversation_id,
        "known_id": known_id,
        "known_version": known_version,
    }
    rows = _LOAD_LATEST_PREPARED.rows(conn, params)
    return loaded_plan(rows, known_version if known is not None else None)


def load_plan(conn: Connection, plan_id: int) -> LoadedPlan | None:
    """A plan and its steps by id, in one statement."""
    result = conn.execute(_LOAD_BY_ID, {"plan_id": plan_id})
    return loaded_plan(list(result.mappings()))


def insert_plan(
    conn: Connection,
    conversation_id: int,
    *,
    max_parallel: int,
    max_transient_failures: int,
    now: datetime,
    intro: str | None = None,
    card_taken: bool = False,
) -> int:
    """A new plan row (status running, version 0); its id. (The cap on a step's transient
    failures is stored in the `max_attempts` column; `intro` is the commander's words the
    card opens with; `card_taken`: its card's first post taken by the caller, as
    `take_card_post` takes it.)"""
    stmt = (
        insert(plans_t)
        .values(
            conversation_id=conversation_id,
            status="running",
            max_parallel=max_parallel,
            max_attempts=max_transient_failures,
            intro=intro or None,
            card_ts=CARD_POSTING if card_taken else None,
            version=0,
            created_at=now,
            updated_at=now,
        )
        .returning(plans_t.c.id)
    )
    return int((conn.execute(stmt)).scalar_one())


def _update_plan(*, status: bool) -> Any:
    """The plan row's version (and with `status` its status) written, guarded by the
    version that was read."""
    values: dict[str, Any] = {"status": bindparam("b_status")} if status else {}
    return (
        update(plans_t)
        .where(plans_t.c.id == bindparam("b_id"), plans_t.c.version == bindparam("b_was_version"))
        .values(**values, version=bindparam("b_version"), updated_at=bindparam("b_updated_at"))
    )


# Without the status when it stays: SQLite rewrites the entries of every index over a column
# an UPDATE sets, changed or not – the plan's (conversation, status) index, one more page
# written to the WAL each reconcile.
_UPDATE_PLAN = {status: Prepared(_update_plan(status=status)) for status in (False, True)}


def update_plan(
    conn: Connection,
    plan_id: int,
    *,
    status: str,
    version: int,
    was_version: int,
    now: datetime,
    was_status: str | None = None,
) -> None:
    """Write the plan's status and version, guarded by the version that was read (and
    `was_status` with it: the status left alone when it is the same)."""
    params = {
        "b_id": plan_id,
        "b_was_version": was_version,
        "b_status": status,
        "b_version": version,
        "b_updated_at": now,
    }
    if _UPDATE_PLAN[status != was_status].rowcount(conn, params) != 1:
        raise ConcurrentPlanChange(f"plan {plan_id}: version {was_version} is gone")


# --- the plan card, and plans as the admin surface lists them -------------------------


CARD_POSTING = "posting"  # card_ts while a sender posts the card (no ts recorded yet)


@dataclass(frozen=True, slots=True)
class PlanCard:
    """The card's message as stored: its ts (None: not posted; CARD_POSTING: a sender took
    the post and has not recorded it yet) and the commander's intro it opens with."""

    ts: str | None
    intro: str
    taken: bool = False  # its first post was just taken for the caller (`take_or_read_card`)

    @property
    def posted(self) -> str | None:
        return self.ts if self.ts != CARD_POSTING else None


async def plan_card(conn: AsyncConnection, plan_id: int) -> PlanCard:
    """The plan's card message and intro, in one statement."""
    row = (
        await conn.execute(
            select(plans_t.c.card_ts, plans_t.c.intro).where(plans_t.c.id == plan_id)
        )
    ).first()
    return PlanCard(row.card_ts, row.intro or "") if row is not None else PlanCard(None, "")


async def take_card_post(conn: AsyncConnection, plan_id: int) -> bool:
    """Take the card's first post (True: no sender took it before, so nothing was posted and
    no look-up in the thread is needed); the ts is recorded by `claim_plan_card`."""
    result = await conn.execute(
        update(plans_t)
        .where(plans_t.c.id == plan_id, plans_t.c.card_ts.is_(None))
        .values(card_ts=CARD_POSTING)
    )
    return bool(result.rowcount)


async def take_or_read_card(conn: AsyncConnection, plan_id: int) -> PlanCard:
    """`take_card_post` and the card's intro in one statement (`taken`); the card as stored
    when a sender took or recorded its post before."""
    row = (
        await conn.execute(
            update(plans_t)
            .where(plans_t.c.id == plan_id, plans_t.c.card_ts.is_(None))
            .values(card_ts=CARD_POSTING)
            .returning(plans_t.c.intro)
        )
    ).first()
    if row is None:
        return await plan_card(conn, plan_id)
    return PlanCard(CARD_POSTING, row.intro or "", taken=True)


async def claim_plan_card(conn: AsyncConnection, plan_id: int, ts: str) -> bool:
    """Record the card's ts unless one was recorded already (then False: that one wins)."""
    result = await conn.execute(
        update(plans_t)
        .where(
            plans_t.c.id == plan_id,
            or_(plans_t.c.card_ts.is_(None), plans_t.c.card_ts == CARD_POSTING),
        )
        .values(card_ts=ts)
    )
    return bool(result.rowcount)


async def active_plans(conn: AsyncConnection, team_id: str) -> list[tuple[int, str, str, str]]:
    """(plan id, status, channel, thread ts) of a workspace's plans that are not finished."""
    rows = await conn.execute(
        select(
            plans_t.c.id,
            plans_t.c.status,
            conversations_t.c.channel_id,
            conversations_t.c.thread_ts,
        )
        .join(conversations_t, conversations_t.c.id == plans_t.c.conversation_id)
        .where(
            conversations_t.c.team_id == team_id,
            plans_t.c.status.in_(("running", "paused")),
        )
        .order_by(plans_t.c.id)
    )
    return [(int(i), str(s), str(c), str(t)) for i, s, c, t in rows]


async def conversations_waiting_on_agent(
    conn: AsyncConnection, team_id: str, agent_name: str
) -> list[int]:
    """Conversations whose unfinished plan has a pending step assigned to `agent_name`."""
    rows = await conn.execute(
        select(conversations_t.c.id)
        .distinct()
        .join(plans_t, plans_t.c.conversation_id == conversations_t.c.id)
        .join(steps_t, steps_t.c.plan_id == plans_t.c.id)
        .where(
            conversations_t.c.team_id == team_id,
            plans_t.c.status.in_(("running", "paused")),
            steps_t.c.assignee == agent_name,
            steps_t.c.status == "pending",
        )
        .order_by(conversations_t.c.id)
    )
    return [int(i) for (i,) in rows]
