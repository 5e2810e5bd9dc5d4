"""What a step attempt reads before its run, in one read transaction.

Its stored session (a run started before continues from it), the thread (the run's prompt
shows a window of it, and the answer stream looks in it for an answer a stopped process left
streaming), the stored plan (only for a first prompt: no stored history) with the files
upstream steps produced that its input asks for, and the conversation's received files (the
attachments to fetch, and what the first prompt says of them). `agents/running/step_runs.py` reads
it once and hands it to the answer stream and the run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.planning.effects import step_key
from flotilla.agents.planning.plan import Plan
from flotilla.agents.planning.plan_store import plan_from_rows
from flotilla.agents.planning.plan_validation import STEP_REF, TEMPLATE
from flotilla.agents.tools.context import RunJob
from flotilla.agents.tools.file_policy import is_text
from flotilla.storage.conversations import thread_messages
from flotilla.storage.db import Database
from flotilla.storage.files import conversation_files, produced_files, read_bytes, received_files
from flotilla.storage.plans import load_plan
from flotilla.storage.records import AgentRunRecord, FileRecord, MessageRecord
from flotilla.storage.runs import load_run

# a connection to read with, opened when first asked for (see `on_demand`)
Connect = Callable[[], Awaitable[AsyncConnection]]
# a file an upstream step produced that a step's input asks for: (step, file, text bytes)
Upstream = tuple[int, FileRecord, bytes | None]
# the plan as this process knows it stored, when it does (`agents.running.plan_reads.remembered`)
Known = Callable[[], Plan | None] | None


@dataclass(frozen=True, slots=True)
class StepReads:
    """A step attempt's reads before its run (see the module)."""

    stored: AgentRunRecord | None
    thread: list[MessageRecord]
    plan: Plan | None  # read for a first prompt only
    received: list[FileRecord] | None  # None: not read here
    upstream: list[Upstream] | None = None  # read with the plan (None: not read here)

    @property
    def first(self) -> bool:
        """Whether the run starts afresh (no stored history): its first prompt is built."""
        return not (self.stored and self.stored.messages)


async def read_step(
    db: Database, job: RunJob, *, with_plan: bool, with_files: bool, known: Known = None
) -> StepReads:
    """`read_step_in`, in a read transaction of its own."""
    async with db.read() as conn:
        return await read_step_in(
            conn, job, with_plan=with_plan, with_files=with_files, known=known
        )


async def read_step_in(
    conn: AsyncConnection,
    job: RunJob,
    *,
    with_plan: bool,
    with_files: bool,
    known: Known = None,
    with_session: bool = True,
) -> StepReads:
    """The job's stored session and thread; `with_plan`: its plan too when the run starts
    afresh (`known`: gives it unread, when the process knows it as stored – asked inside
    this transaction); `with_files`: the conversation's received files; not
    `with_session`: the caller knows no session is stored (none is read)."""
    stored = await load_run(conn, job.run_key) if with_session else None
    conversation_id = job.conversation_id
    thread = await thread_messages(conn, conversation_id) if conversation_id is not None else []
    plan: Plan | None = None
    upstream = None
    if with_plan and job.plan_id is not None and not (stored and stored.messages):
        plan = known() if known is not None else None
        if plan is None:
            loaded = await conn.run_sync(load_plan, job.plan_id)
            plan = plan_from_rows(loaded.plan, loaded.steps or []) if loaded else None
    received = None
    if with_files and conversation_id is not None:
        if output_refs_of(plan, job.step_index):  # every file of it, one read for both
            files = await conversation_files(conn, conversation_id)
            received = [f for f in files if f.direction == "received"]
            upstream = await upstream_outputs(conn, plan, job.step_index, files)
        else:
            received = await received_files(conn, conversation_id)
    if upstream is None and plan is not None:
        upstream = await upstream_outputs(conn, plan, job.step_index)
    return StepReads(stored, list(thread), plan, received, upstream)


def output_refs(template: str) -> list[int]:
    """The steps whose `output_files` a step input template asks for, in order."""
    refs: list[int] = []
    for name in TEMPLATE.findall(template):
        ref = STEP_REF.match(name.strip())
        if ref is not None and ref.group(2) == "output_files" and int(ref.group(1)) not in refs:
            refs.append(int(ref.group(1)))
    return refs


def output_refs_of(plan: Plan | None, step_index: int | None) -> list[int]:
    """`output_refs` of the plan's step (none without a plan)."""
    step = plan.step(step_index) if plan is not None and step_index is not None else None
    return output_refs(step.input) if step is not None else []


async def upstream_outputs(
    conn: AsyncConnection,
    plan: Plan | None,
    step_index: int | None,
    files: Sequence[FileRecord] | None = None,
) -> list[Upstream]:
    """The shared files of the upstream attempts that succeeded, whose `output_files` the
    step's input asks for, with a text file's bytes (nothing read when it asks for none);
    `files`: the conversation's files as the caller just read them (else read here)."""
    refs = output_refs_of(plan, step_index)
    if plan is None or not refs:
        return []
    if files is None:
        produced: Sequence[FileRecord] = await produced_files(conn, plan_id=plan.id)
    else:
        produced = [f for f in files if f.direction == "produced" and f.plan_id == plan.id]
    out: list[Upstream] = []
    for index in refs:
        source = plan.step(index)
        if source is None:
            continue
        run_key = step_key(plan.id, index, source.attempts)  # the attempt that succeeded
        for file in produced:
            if file.run_key == run_key and file.state == "shared":
                text = is_text(file.mimetype, file.name)
                out.append((index, file, await read_bytes(conn, file) if text else None))
    return out


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
