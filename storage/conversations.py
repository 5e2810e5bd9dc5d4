"""Conversations (one per thread Flotilla works in) and the thread's messages.

Every function takes an open connection; the caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, Update, bindparam, select, update
from sqlalchemy.engine import Connection, RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.records import (
    ConversationRecord,
    MessageRecord,
)
from flotilla.storage.sql import insert_ignoring_conflict
from flotilla.storage.tables import (
    Conversation,
    ThreadMessage,
)
from flotilla.storage.workspaces import ensure_workspace

conversations_t: Table = Conversation.__table__  # type: ignore[assignment]
messages_t: Table = ThreadMessage.__table__  # type: ignore[assignment]


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


async def update_message(
    conn: AsyncConnection,
    channel_id: str,
    ts: str,
    *,
    text: str,
    metadata: dict[str, Any] | None,
) -> None:
    """Keep an edited message's new text and metadata (Flotilla's own edits)."""
    await conn.execute(message_update(channel_id, ts, text, metadata))


def message_update(channel_id: str, ts: str, text: str, metadata: dict[str, Any] | None) -> Update:
    """The statement that changes a stored message's text and metadata (run here, or by a
    unit of work that carries it)."""
    return (
        update(messages_t)
        .where(messages_t.c.channel_id == channel_id, messages_t.c.ts == ts)
        .values(text=text, metadata=metadata)
    )


async def thread_messages(
    conn: AsyncConnection, conversation_id: int, *, limit: int = 200
) -> list[MessageRecord]:
    """The newest `limit` stored messages of a thread, oldest first – in Slack's order (by
    ts), not the order they were stored in: a message Flotilla posted may be stored after
    a person's later one (a step's dispatch message is kept as its run claims its slot).
    Slack's ts strings ("1733333333.123456") sort as they compare."""
    rows = (
        await conn.execute(
            select(messages_t)
            .where(messages_t.c.conversation_id == conversation_id)
            .order_by(messages_t.c.ts.desc(), messages_t.c.id.desc())
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


def request_text(conn: Connection, conversation_id: int) -> str:
    """The person's original request of the conversation (for `{{request}}`)."""
    stmt = select(conversations_t.c.request_text).where(conversations_t.c.id == conversation_id)
    return str(conn.scalar(stmt) or "")


_BUMP_LOCK_VERSION = (
    update(conversations_t)
    .where(conversations_t.c.id == bindparam("conversation_id"))
    .values(lock_version=conversations_t.c.lock_version + 1)
)


def bump_lock_version(conn: Connection, conversation_id: int) -> None:
    """Take the conversation row's lock for the rest of the transaction and move its lock
    version on, so an optimistic reconcile that read the old version writes nothing."""
    conn.execute(_BUMP_LOCK_VERSION, {"conversation_id": conversation_id})
