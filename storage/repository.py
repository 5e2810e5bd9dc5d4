"""The queries Flotilla needs, named for what they mean.

Every function takes an open `AsyncConnection` (the caller owns the transaction, so one
unit of work can span several calls) and the current time where it writes one. They use
SQLAlchemy Core: one statement per call, no ORM identity map on the hot path.
Plan and step persistence lives in `storage/plans.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Insert, Table, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.records import (
    AgentRecord,
    AgentRunRecord,
    AuditRecord,
    ConversationRecord,
    MessageRecord,
    OutboxRecord,
    UsageTotal,
)
from storage.tables import (
    Agent,
    AgentRun,
    AuditEntry,
    Conversation,
    OutboxEntry,
    Plan,
    PlanStep,
    ProcessedEvent,
    RunLease,
    ThreadMessage,
    UsageEntry,
    Workspace,
)

agents_t: Table = Agent.__table__  # type: ignore[assignment]
runs_t: Table = AgentRun.__table__  # type: ignore[assignment]
audit_t: Table = AuditEntry.__table__  # type: ignore[assignment]
conversations_t: Table = Conversation.__table__  # type: ignore[assignment]
outbox_t: Table = OutboxEntry.__table__  # type: ignore[assignment]
plans_t: Table = Plan.__table__  # type: ignore[assignment]
leases_t: Table = RunLease.__table__  # type: ignore[assignment]
events_t: Table = ProcessedEvent.__table__  # type: ignore[assignment]
messages_t: Table = ThreadMessage.__table__  # type: ignore[assignment]
usage_t: Table = UsageEntry.__table__  # type: ignore[assignment]
workspaces_t: Table = Workspace.__table__  # type: ignore[assignment]


class DuplicateError(ValueError):
    """A row with the same unique key exists already."""


def insert_ignoring_conflict(conn: AsyncConnection, table: Table, **values: Any) -> Insert:
    """`INSERT … ON CONFLICT DO NOTHING` in the connection's dialect."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table).values(**values).on_conflict_do_nothing()
    return sqlite.insert(table).values(**values).on_conflict_do_nothing()


# --- workspaces -------------------------------------------------------------------------


async def ensure_workspace(
    conn: AsyncConnection, team_id: str, now: datetime, name: str = ""
) -> bool:
    """Create the workspace row on first contact (True); an existing one is left as it is."""
    stmt = insert_ignoring_conflict(
        conn, workspaces_t, team_id=team_id, name=name, settings={}, created_at=now
    )
    return bool((await conn.execute(stmt)).rowcount)


async def workspace_default_model(conn: AsyncConnection, team_id: str) -> str | None:
    row = await conn.scalar(
        select(workspaces_t.c.default_model).where(workspaces_t.c.team_id == team_id)
    )
    return row


async def set_workspace_default_model(
    conn: AsyncConnection, team_id: str, model: str | None
) -> None:
    await conn.execute(
        update(workspaces_t).where(workspaces_t.c.team_id == team_id).values(default_model=model)
    )


# --- events already processed -----------------------------------------------------------


async def mark_event_processed(conn: AsyncConnection, key: str, now: datetime) -> bool:
    """Record `key` (an event id, or channel+ts) as applied. False when it was already.

    Call it inside the transaction that applies the event: a retried delivery then
    either sees the key or waits for the first transaction and finds it committed.
    """
    result = await conn.execute(insert_ignoring_conflict(conn, events_t, key=key, processed_at=now))
    return bool(result.rowcount)


async def forget_processed_events_before(conn: AsyncConnection, cutoff: datetime) -> int:
    """Prune de-duplication keys older than any retry Slack would still send."""
    result = await conn.execute(delete(events_t).where(events_t.c.processed_at < cutoff))
    return int(result.rowcount)


# --- conversations and their messages ---------------------------------------------------


def _conversation(row: RowMapping) -> ConversationRecord:
    return ConversationRecord(
        id=row["id"],
        team_id=row["team_id"],
        channel_id=row["channel_id"],
        thread_ts=row["thread_ts"],
        requested_by=row["requested_by"],
        request_text=row["request_text"],
    )


async def find_conversation(
    conn: AsyncConnection, team_id: str, channel_id: str, thread_ts: str
) -> ConversationRecord | None:
    row = (
        (
            await conn.execute(
                select(conversations_t).where(
                    conversations_t.c.team_id == team_id,
                    conversations_t.c.channel_id == channel_id,
                    conversations_t.c.thread_ts == thread_ts,
                )
            )
        )
        .mappings()
        .first()
    )
    return _conversation(row) if row else None


async def get_conversation(conn: AsyncConnection, conversation_id: int) -> ConversationRecord:
    row = (
        (await conn.execute(select(conversations_t).where(conversations_t.c.id == conversation_id)))
        .mappings()
        .one()
    )
    return _conversation(row)


async def open_conversation(
    conn: AsyncConnection,
    *,
    team_id: str,
    channel_id: str,
    thread_ts: str,
    requested_by: str | None,
    request_text: str,
    now: datetime,
) -> ConversationRecord:
    """The conversation of a thread, created on its first message (idempotent)."""
    await ensure_workspace(conn, team_id, now)
    await conn.execute(
        insert_ignoring_conflict(
            conn,
            conversations_t,
            team_id=team_id,
            channel_id=channel_id,
            thread_ts=thread_ts,
            requested_by=requested_by,
            request_text=request_text,
            created_at=now,
        )
    )
    found = await find_conversation(conn, team_id, channel_id, thread_ts)
    assert found is not None  # inserted or already there, in this transaction
    return found


async def store_message(
    conn: AsyncConnection, conversation_id: int, message: MessageRecord, now: datetime
) -> bool:
    """Keep a thread message; False when this channel+ts was stored already."""
    result = await conn.execute(
        insert_ignoring_conflict(
            conn,
            messages_t,
            conversation_id=conversation_id,
            channel_id=message.channel_id,
            ts=message.ts,
            user_id=message.user_id,
            bot_id=message.bot_id,
            author_name=message.author_name,
            text=message.text,
            metadata=message.metadata,
            created_at=now,
        )
    )
    return bool(result.rowcount)


async def thread_messages(
    conn: AsyncConnection, conversation_id: int, *, limit: int = 200
) -> list[MessageRecord]:
    """The newest `limit` stored messages of a thread, oldest first."""
    rows = (
        await conn.execute(
            select(messages_t)
            .where(messages_t.c.conversation_id == conversation_id)
            .order_by(messages_t.c.id.desc())
            .limit(limit)
        )
    ).mappings()
    records = [
        MessageRecord(
            channel_id=r["channel_id"],
            ts=r["ts"],
            user_id=r["user_id"],
            bot_id=r["bot_id"],
            author_name=r["author_name"],
            text=r["text"],
            metadata=r["metadata"],
        )
        for r in rows
    ]
    records.reverse()
    return records


# --- agents -----------------------------------------------------------------------------

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


# --- outbox -----------------------------------------------------------------------------


async def enqueue_effect(
    conn: AsyncConnection,
    *,
    idempotency_key: str,
    kind: str,
    payload: dict[str, Any],
    conversation_id: int | None,
    now: datetime,
) -> bool:
    """Record a side effect to perform after commit. False when the key exists already."""
    result = await conn.execute(
        insert_ignoring_conflict(
            conn,
            outbox_t,
            idempotency_key=idempotency_key,
            kind=kind,
            payload=payload,
            conversation_id=conversation_id,
            state="pending",
            attempts=0,
            available_at=now,
            created_at=now,
        )
    )
    return bool(result.rowcount)


async def claim_effects(
    conn: AsyncConnection, *, now: datetime, lease_until: datetime, limit: int = 20
) -> list[OutboxRecord]:
    """Claim due outbox rows for this process until `lease_until`.

    On PostgreSQL, rows another replica is claiming are skipped (`FOR UPDATE SKIP
    LOCKED`); on SQLite the write transaction already serialises claimers.
    """
    stmt = (
        select(outbox_t)
        .where(outbox_t.c.state == "pending", outbox_t.c.available_at <= now)
        .order_by(outbox_t.c.id)
        .limit(limit)
    )
    if conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True)
    rows = list((await conn.execute(stmt)).mappings())
    if not rows:
        return []
    ids = [r["id"] for r in rows]
    await conn.execute(
        update(outbox_t)
        .where(outbox_t.c.id.in_(ids))
        .values(available_at=lease_until, attempts=outbox_t.c.attempts + 1)
    )
    return [
        OutboxRecord(
            id=r["id"],
            idempotency_key=r["idempotency_key"],
            conversation_id=r["conversation_id"],
            kind=r["kind"],
            payload=r["payload"],
            attempts=r["attempts"] + 1,
            created_at=r["created_at"],
        )
        for r in rows
    ]


async def mark_effect_done(conn: AsyncConnection, effect_id: int, now: datetime) -> None:
    await conn.execute(
        update(outbox_t).where(outbox_t.c.id == effect_id).values(state="sent", sent_at=now)
    )


async def hold_effect(conn: AsyncConnection, key: str, until: datetime) -> None:
    """Keep a pending row claimed until `until` (now: free it for any process)."""
    await conn.execute(
        update(outbox_t)
        .where(outbox_t.c.idempotency_key == key, outbox_t.c.state == "pending")
        .values(available_at=until)
    )


async def finish_effect(conn: AsyncConnection, key: str, now: datetime) -> None:
    """Mark the row of `key` sent (long work settling its effect)."""
    await conn.execute(
        update(outbox_t)
        .where(outbox_t.c.idempotency_key == key, outbox_t.c.state == "pending")
        .values(state="sent", sent_at=now)
    )


async def retry_effect_later(
    conn: AsyncConnection, effect_id: int, *, error: str, available_at: datetime
) -> None:
    await conn.execute(
        update(outbox_t)
        .where(outbox_t.c.id == effect_id)
        .values(available_at=available_at, last_error=error[:2000])
    )


async def give_up_effect(conn: AsyncConnection, effect_id: int, *, error: str) -> None:
    await conn.execute(
        update(outbox_t)
        .where(outbox_t.c.id == effect_id)
        .values(state="failed", last_error=error[:2000])
    )


async def pending_effect_count(conn: AsyncConnection) -> int:
    return int(
        await conn.scalar(
            select(func.count()).select_from(outbox_t).where(outbox_t.c.state == "pending")
        )
        or 0
    )


async def next_effect_due(conn: AsyncConnection) -> datetime | None:
    """When the earliest pending outbox row becomes due (None when nothing is pending)."""
    due: datetime | None = await conn.scalar(
        select(func.min(outbox_t.c.available_at)).where(outbox_t.c.state == "pending")
    )
    if due is not None and due.tzinfo is None:  # SQLite's MIN() bypasses the column type
        due = due.replace(tzinfo=UTC)
    return due


# --- plan cards -------------------------------------------------------------------------


async def plan_card_ts(conn: AsyncConnection, plan_id: int) -> str | None:
    """The ts of the plan's card message, once posted."""
    result: str | None = await conn.scalar(select(plans_t.c.card_ts).where(plans_t.c.id == plan_id))
    return result


async def claim_plan_card(conn: AsyncConnection, plan_id: int, ts: str) -> bool:
    """Record the card's ts unless one was recorded already (then False: that one wins)."""
    result = await conn.execute(
        update(plans_t)
        .where(plans_t.c.id == plan_id, plans_t.c.card_ts.is_(None))
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


# --- agent runs (crash-safe sessions) ---------------------------------------------------


async def save_run(
    conn: AsyncConnection,
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
) -> None:
    """Store a run's message history (after every model turn) and its status."""
    values = dict(
        agent_name=agent_name,
        model=model,
        status=status,
        messages=messages,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        updated_at=now,
    )
    result = await conn.execute(update(runs_t).where(runs_t.c.run_key == run_key).values(**values))
    if result.rowcount:
        return
    await conn.execute(
        insert(runs_t).values(
            run_key=run_key,
            conversation_id=conversation_id,
            plan_id=plan_id,
            step_index=step_index,
            created_at=now,
            **values,
        )
    )


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


# --- run leases -------------------------------------------------------------------------


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
        where=(leases_t.c.lease_until < now) | (leases_t.c.owner == owner),
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


# --- usage and audit --------------------------------------------------------------------


async def record_usage(
    conn: AsyncConnection,
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
) -> None:
    await conn.execute(
        insert(usage_t).values(
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


async def audit(
    conn: AsyncConnection,
    *,
    team_id: str,
    actor: str,
    action: str,
    now: datetime,
    target: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Append to the audit log (who, what, when). Never pass secrets in `details`."""
    await conn.execute(
        insert(audit_t).values(
            team_id=team_id,
            actor=actor,
            action=action,
            target=target,
            details=details or {},
            created_at=now,
        )
    )


async def audit_trail(
    conn: AsyncConnection, team_id: str, *, limit: int = 50
) -> Sequence[AuditRecord]:
    """The newest audit entries of a workspace, newest first."""
    rows = (
        await conn.execute(
            select(audit_t)
            .where(audit_t.c.team_id == team_id)
            .order_by(audit_t.c.id.desc())
            .limit(limit)
        )
    ).mappings()
    return [
        AuditRecord(
            actor=r["actor"],
            action=r["action"],
            target=r["target"],
            details=r["details"],
            created_at=r["created_at"],
        )
        for r in rows
    ]


# --- administration ---------------------------------------------------------------------

steps_t: Table = PlanStep.__table__  # type: ignore[assignment]


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
