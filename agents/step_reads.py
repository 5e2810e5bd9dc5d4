"""What a step attempt reads before its run, in one read transaction.

Its stored session (a run started before continues from it), the thread (the run's prompt
shows a window of it, and the answer stream looks in it for an answer a stopped process left
streaming), the stored plan (only for a first prompt: no stored history) and the
conversation's received files (the attachments to fetch, and what the first prompt says of
them). `agents/step_runs.py` reads it once and hands it to the answer stream and the run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from agents.plan import Plan
from agents.plan_store import plan_from_rows
from agents.tools.context import RunJob
from storage.conversations import thread_messages
from storage.db import Database
from storage.files import received_files
from storage.plans import load_plan
from storage.records import AgentRunRecord, FileRecord, MessageRecord
from storage.runs import load_run

# a connection to read with, opened when first asked for (see `on_demand`)
Connect = Callable[[], Awaitable[AsyncConnection]]


@dataclass(frozen=True, slots=True)
class StepReads:
    """A step attempt's reads before its run (see the module)."""

    stored: AgentRunRecord | None
    thread: list[MessageRecord]
    plan: Plan | None  # read for a first prompt only
    received: list[FileRecord] | None  # None: not read here

    @property
    def first(self) -> bool:
        """Whether the run starts afresh (no stored history): its first prompt is built."""
        return not (self.stored and self.stored.messages)


async def read_step(db: Database, job: RunJob, *, with_plan: bool, with_files: bool) -> StepReads:
    """`read_step_in`, in a read transaction of its own."""
    async with db.read() as conn:
        return await read_step_in(conn, job, with_plan=with_plan, with_files=with_files)


async def read_step_in(
    conn: AsyncConnection, job: RunJob, *, with_plan: bool, with_files: bool
) -> StepReads:
    """The job's stored session and thread; `with_plan`: its plan too when the run starts
    afresh; `with_files`: the conversation's received files."""
    stored = await load_run(conn, job.run_key)
    conversation_id = job.conversation_id
    thread = await thread_messages(conn, conversation_id) if conversation_id is not None else []
    plan: Plan | None = None
    if with_plan and job.plan_id is not None and not (stored and stored.messages):
        loaded = await conn.run_sync(load_plan, job.plan_id)
        plan = plan_from_rows(loaded.plan, loaded.steps or []) if loaded else None
    received = None
    if with_files and conversation_id is not None:
        received = await received_files(conn, conversation_id)
    return StepReads(stored, list(thread), plan, received)


def given(conn: AsyncConnection) -> Connect:
    """`conn` as a `Connect` (a transaction already open)."""

    async def connect() -> AsyncConnection:
        return conn

    return connect


def on_demand(db: Database, stack: AsyncExitStack) -> Connect:
    """A read transaction of `db` opened on first use and closed with `stack` (none at all
    when nothing asks for one)."""
    opened: list[AsyncConnection] = []

    async def connect() -> AsyncConnection:
        if not opened:
            opened.append(await stack.enter_async_context(db.read()))
        return opened[0]

    return connect
