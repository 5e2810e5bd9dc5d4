"""The conversation records a process keeps (`Context.conversations` / `Context.threads`)
are never stale: a kept record carries only columns no one changes, and a thread not found
is not kept (another process may open its conversation the next moment)."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from flotilla.agents.reconciling.inbox import Incoming, record_request
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.agents.running.run_context import Context, ExecutorOptions
from flotilla.storage.conversations import bump_lock_version, conversations_t, get_conversation
from flotilla.storage.db import Database
from flotilla.storage.records import ConversationRecord

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
# the columns of a conversation's row written after it is created (storage/conversations.py
# `bump_lock_version`, storage/optimistic.py's versioned write): none is kept in memory
CHANGING = {"lock_version"}


def test_a_kept_conversation_carries_no_column_that_changes() -> None:
    kept = {f.name for f in fields(ConversationRecord)}
    assert kept.isdisjoint(CHANGING)
    # a new column of the row is either kept (then it must never change) or named here
    assert kept | CHANGING | {"created_at"} == set(conversations_t.c.keys())


def _process(db: Database) -> Context:
    """One process's context (its own caches) on the shared database."""
    parts: dict[str, Any] = dict(
        db=db,
        reconciler=Reconciler(db),
        port=None,
        choose_model=None,
        clock=lambda: NOW,
        options=ExecutorOptions(),
        observer=None,
    )
    context = Context(**parts)
    context.team_id = "T1"
    return context


async def test_a_thread_opened_by_another_process_is_found_and_kept_right(db: Database) -> None:
    here, there = _process(db), _process(db)
    assert await here.find_conversation("C1", "1.0") is None  # not opened yet
    recorded = await record_request(
        db,
        NOW,
        team_id="T1",
        thread_ts="1.0",
        message=Incoming(channel="C1", ts="1.0", text="hello", user="U1"),
        request="hello",
        for_commander=True,
    )
    assert recorded is not None and not recorded.handed  # no sender: the outbox is looked at
    opened = recorded.conversation
    there.remember(opened)  # the writer keeps it once committed (bot/handlers.py on_mention)
    found = await here.find_conversation("C1", "1.0")  # the None before was not kept
    assert found == opened and here.known_conversation("C1", "1.0") == opened
    async with db.write() as conn:  # every change a conversation's row sees after creation
        await conn.run_sync(bump_lock_version, opened.id)
    async with db.read() as conn:
        fresh = await get_conversation(conn, opened.id)
    for process in (here, there):
        assert await process.conversation(opened.id) == fresh
        assert await process.find_conversation("C1", "1.0") == fresh
    assert here.known_conversation("C2", "1.0") is None  # another channel's thread is another
