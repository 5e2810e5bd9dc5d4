"""The per-conversation lock: every state-changing path of one conversation runs under it.

It is a write transaction that first takes the lock and is released by commit/rollback:
- SQLite: the transaction starts with `BEGIN IMMEDIATE` (see `storage/db.py`), i.e. the
  database's single write lock, which holds across processes. An in-process
  `asyncio.Lock` per conversation in front of it avoids pointless contention on the
  file lock (and the busy-timeout polling it causes).
- PostgreSQL: `SELECT … FOR UPDATE` on the conversation's row, or
  `pg_advisory_xact_lock(hashtext(key))` for a conversation that has no row yet.
  Both are transaction scoped: released on commit, rollback or a dropped connection,
  and fine behind pgbouncer's transaction pooling.
Never hold it across a Slack or model call: decide inside, act after commit.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import Table, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.db import Database
from storage.tables import Conversation

conversations_t: Table = Conversation.__table__  # type: ignore[assignment]


class ConversationLocks:
    """Hands out locked write transactions, one conversation at a time."""

    def __init__(self) -> None:
        # weak values: a lock lives while someone holds or waits for it
        self._local: weakref.WeakValueDictionary[int | str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    def _lock_for(self, key: int | str) -> asyncio.Lock:
        lock = self._local.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._local[key] = lock
        return lock

    @asynccontextmanager
    async def conversation(
        self, db: Database, conversation_id: int
    ) -> AsyncIterator[AsyncConnection]:
        """A write transaction holding the lock of an existing conversation."""
        async with self._lock_for(conversation_id), db.write() as conn:
            await lock_conversation(conn, conversation_id)
            yield conn

    @asynccontextmanager
    async def key(self, db: Database, key: str) -> AsyncIterator[AsyncConnection]:
        """A write transaction holding the lock named `key` (a thread with no row yet)."""
        async with self._lock_for(key), db.write() as conn:
            await lock_key(conn, key)
            yield conn


async def lock_conversation(conn: AsyncConnection, conversation_id: int) -> None:
    """Take the conversation's lock inside the current transaction."""
    if conn.dialect.name == "postgresql":
        stmt = (
            select(conversations_t.c.id)
            .where(conversations_t.c.id == conversation_id)
            .with_for_update()
        )
        await conn.execute(stmt)
    # SQLite: BEGIN IMMEDIATE already holds the database's write lock


async def lock_key(conn: AsyncConnection, key: str) -> None:
    """Take a named lock inside the current transaction (PostgreSQL advisory lock)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(select(func.pg_advisory_xact_lock(func.hashtext(key))))
