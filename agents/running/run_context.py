"""What the executor's jobs share: its options, the job record and the context a job runs
in (the database, the reconciler, the Slack port, the model chooser, the clock)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from flotilla.agents.core.clock import Clock
from flotilla.agents.core.lru import LRUCache
from flotilla.agents.core.retry_policy import RetryPolicies
from flotilla.agents.reconciling.ports import ChooseModel, RunObserver, SlackPort
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.agents.scheduling.admission_policy import SchedulerOptions
from flotilla.agents.scheduling.roster import Roster
from flotilla.agents.scheduling.wait_marks import WaitMarks
from flotilla.agents.tools.file_policy import FilePolicy
from flotilla.storage.conversations import find_conversation, get_conversation
from flotilla.storage.db import Database
from flotilla.storage.records import ConversationRecord, RunRequestRecord

CONVERSATION_CACHE_SIZE = 1000  # conversation records kept in memory per process
Thread = tuple[str, str, str]  # a conversation's workspace, channel and thread ts


@dataclass(frozen=True, slots=True)
class ExecutorOptions:
    """How the executor runs work (read from the settings in bot/)."""

    max_parallel: int = 1
    retry: RetryPolicies = field(default_factory=RetryPolicies)  # every retry's waits, tries
    lease: timedelta = timedelta(seconds=30)  # a crashed process's work waits at most this
    heartbeat: timedelta = timedelta(seconds=5)  # renews the lease, notices a cancel
    poll_seconds: float = 5.0  # look at the outbox at least this often (expired leases)
    files: FilePolicy = field(default_factory=FilePolicy)  # attachments taken, files kept
    scheduler: SchedulerOptions = field(default_factory=SchedulerOptions)  # admission control

    @property
    def max_transient_failures(self) -> int:
        """Tries a new plan's steps get for transient failures (the step policy's)."""
        return self.retry.step.maximum_attempts

    @property
    def commander_retries(self) -> int:
        """How often a commander turn that failed or stalled its plan is asked again."""
        return self.retry.commander.maximum_attempts - 1


@dataclass(slots=True)
class Job:
    """Long work of this process: one agent run or commander turn."""

    key: str  # the outbox row it holds
    kind: str  # the kind of effect that started it
    plan_id: int | None
    step: int | None
    attempt: int | None
    conversation_id: int | None = None
    run_key: str | None = None  # the lease it runs under
    scheduled: bool = (
        False  # its lease is its granted run request (agents/running/slot_requests.py)
    )
    take_grant: bool = False  # a pass here granted its run while it was claiming: it runs it
    row_until: datetime | None = None  # its row's delivery claim: held here until then
    task: asyncio.Task[None] | None = None
    cancelled: bool = False  # the plan was stopped: the work is over, not handed on
    lease_lost: bool = False  # another process took the lease: it settles the row
    working: bool = True  # False once the work ended: its heartbeat then cancels nothing
    # set once the run gave its slot to urgent work at a turn boundary
    # (agents/running/preemption.py)
    pause: asyncio.Event = field(default_factory=asyncio.Event)
    passed: RunRequestRecord | None = None  # the urgent run its slot went to, to start here


@dataclass(slots=True)
class Context:
    """What a job needs: handed to `step_runs` and `commander_turns`."""

    db: Database
    reconciler: Reconciler
    port: SlackPort
    choose_model: ChooseModel
    clock: Clock
    options: ExecutorOptions
    observer: RunObserver
    team_id: str = ""
    # conversations this process worked in lately, by id and by thread: bounded, a
    # long-running process sees many. A record never changes once its row is committed
    # (`ConversationRecord` carries none of the row's changing columns; no row is deleted),
    # so no other process can make a kept one stale; a thread not found is never kept.
    conversations: LRUCache[int, ConversationRecord] = field(
        default_factory=lambda: LRUCache(CONVERSATION_CACHE_SIZE)
    )
    threads: LRUCache[Thread, ConversationRecord] = field(
        default_factory=lambda: LRUCache(CONVERSATION_CACHE_SIZE)
    )
    # the workspace's agents, read once for many look-ups (see `agents.scheduling.roster`)
    roster: Roster | None = None
    # the plans that may have a run waiting with a reason (the admission passes' marks)
    waits: WaitMarks = field(default_factory=WaitMarks)

    def __post_init__(self) -> None:
        if self.roster is None:
            self.roster = Roster(self.db, lambda: self.team_id)

    @property
    def agents(self) -> Roster:
        assert self.roster is not None  # set in __post_init__
        return self.roster

    def remember(self, conversation: ConversationRecord) -> None:
        """Keep a conversation's record as committed (read, or written by this process –
        after its transaction committed: a rolled-back id may be given again)."""
        self.conversations.put(conversation.id, conversation)
        thread = (conversation.team_id, conversation.channel_id, conversation.thread_ts)
        self.threads.put(thread, conversation)

    def known_conversation(self, channel: str, thread_ts: str) -> ConversationRecord | None:
        """The conversation of a thread as kept here (no read), if any."""
        return self.threads.get((self.team_id, channel, thread_ts))

    async def conversation(self, conversation_id: int) -> ConversationRecord:
        """The conversation's record (it never changes: kept, least recently used
        forgotten first)."""
        known = self.conversations.get(conversation_id)
        if known is None:
            async with self.db.read() as conn:
                known = await get_conversation(conn, conversation_id)
            self.remember(known)
        return known

    async def find_conversation(self, channel: str, thread_ts: str) -> ConversationRecord | None:
        """The conversation of a thread of this workspace, or None (not kept: another
        process may open it any moment)."""
        known = self.known_conversation(channel, thread_ts)
        if known is None:
            async with self.db.read() as conn:
                known = await find_conversation(conn, self.team_id, channel, thread_ts)
            if known is not None:
                self.remember(known)
        return known

    async def enabled_names(self) -> list[str]:
        return await self.agents.enabled_names()
