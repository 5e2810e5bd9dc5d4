"""What people (and agents with their own app) write in a thread, recorded durably; and
every other request Flotilla acts on (clicks, submissions, commands, Home openings), stored
before Slack's ack.

The Slack edge parses a message and hands it here; each function records it in one
transaction together with the work it causes (a commander turn in the outbox), so once
a message is stored its turn is sure to happen, and a redelivered event records nothing
twice. Other requests are stored whole in the inbox table (`storage/inbox.py`) and marked
processed when their work is done; a recovery pass replays those cut short.

A store before the ack is retried briefly when the database is busy or briefly away
(`retry_storage`: SQLite's "database is locked" under a burst); if it still fails the
edge refuses the request (events: HTTP 500, Slack retries; interactions: a sentence).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.core.clock import Sleep
from flotilla.agents.core.failures import is_storage_error
from flotilla.agents.core.retry_policy import BEFORE_ACK, BEFORE_ACK_BUDGET
from flotilla.agents.planning.effects import MessageForCommander, step_key, to_row, turn_key
from flotilla.agents.planning.plan import Plan, StepSucceeded
from flotilla.agents.reconciling.outbox import OutboxSender
from flotilla.agents.reconciling.run_history import load_messages
from flotilla.agents.reconciling.run_results import result_from_history
from flotilla.storage.conversations import open_conversation, store_message
from flotilla.storage.db import Database
from flotilla.storage.events import record_event
from flotilla.storage.files import ReceivedFile, produced_files, record_received
from flotilla.storage.inbox import claim_unprocessed_inbox, finish_inbox, store_inbox
from flotilla.storage.outbox import enqueue_claimed_unless_present, enqueue_effects
from flotilla.storage.records import ConversationRecord, InboxRecord, MessageRecord, OutboxRecord
from flotilla.storage.runs import load_run

log = logging.getLogger(__name__)
T = TypeVar("T")


async def retry_storage(
    work: Callable[[], Awaitable[T]],
    *,
    budget: float = BEFORE_ACK_BUDGET.total_seconds(),
    sleep: Sleep = asyncio.sleep,
) -> T:
    """`work()`, tried again under the `before_ack` retry policy while it fails with a
    storage error (the database busy or briefly away) and `budget` seconds are not spent;
    then it raises. `sleep`: how the waits between tries are spent (tests pass their own);
    the budget counts the tries' time and the waits."""
    spent, failures = 0.0, 0
    while True:
        began = time.monotonic()
        try:
            return await work()
        except Exception as exc:
            spent += time.monotonic() - began
            failures += 1
            wait = BEFORE_ACK.delay(failures).total_seconds()
            if not is_storage_error(exc) or spent + wait > budget:
                raise
            log.info("storage busy or away (%s); trying again", type(exc).__name__)
        await sleep(wait)  # a backoff between tries, not a wait for a condition
        spent += wait


async def store_inbound(
    db: Database, now: datetime, *, key: str, kind: str, body: dict[str, Any], claim: timedelta
) -> int | None:
    """Store a request before its ack (retried while storage is busy): its inbox id, or
    None when it was stored already (a redelivery)."""

    async def store() -> int | None:
        async with db.write() as conn:
            return await store_inbox(
                conn, key=key, kind=kind, body=body, now=now, claimed_until=now + claim
            )

    return await retry_storage(store)


async def finish_inbound(db: Database, inbox_id: int, now: datetime) -> None:
    """The request's work is done (or answered with a sentence): not replayed again."""

    async def finish() -> None:
        async with db.write() as conn:
            await finish_inbox(conn, inbox_id, now)

    await retry_storage(finish, budget=30.0)


@dataclass(slots=True)
class InboxFinish:
    """A stored request's finish (its inbox row processed): on its own once the listener is
    done (`__call__`), or in a write the listener makes anyway (`finish_in`, then
    `committed`: the call then writes nothing). A failed finish is logged: the request is
    replayed, and the listeners answer a repeat sensibly."""

    db: Database
    inbox_id: int
    clock: Callable[[], datetime]
    done: bool = False
    _written: bool = False  # `finish_in` ran in a write not known to have committed yet

    async def finish_in(self, conn: AsyncConnection) -> None:
        await finish_inbox(conn, self.inbox_id, self.clock())
        self._written = True

    def committed(self) -> None:
        """The write the caller offered `finish_in` to committed (whether or not it ran)."""
        self.done = self.done or self._written

    async def __call__(self) -> None:
        if self.done:
            return
        try:
            await finish_inbound(self.db, self.inbox_id, self.clock())
        except Exception:
            log.warning("could not mark inbox row %d processed", self.inbox_id, exc_info=True)


async def claim_cut_short(db: Database, now: datetime, claim: timedelta) -> list[InboxRecord]:
    """Stored requests whose handling was cut short (their claim ran out unprocessed),
    claimed by this process for `claim` to be replayed."""
    async with db.write() as conn:
        return await claim_unprocessed_inbox(conn, now, now + claim)


@dataclass(frozen=True, slots=True)
class Incoming:
    """A message as the edge parsed it (Slack's fields, nothing Flotilla-specific)."""

    channel: str
    ts: str
    text: str
    user: str | None = None
    bot_id: str | None = None
    username: str | None = None
    metadata: dict[str, Any] | None = None
    # attachments, each with its refusal (type, declared size) decided at the edge
    files: tuple[ReceivedFile, ...] = field(default_factory=tuple)

    def record(self, text: str | None = None) -> MessageRecord:
        return MessageRecord(
            channel_id=self.channel,
            ts=self.ts,
            user_id=self.user,
            bot_id=self.bot_id,
            author_name=self.username,
            text=self.text if text is None else text,
            metadata=self.metadata,
        )


def _turn(conversation_id: int, message: Incoming, text: str) -> MessageForCommander:
    return MessageForCommander(
        key=turn_key(conversation_id, message.ts),
        conversation_id=conversation_id,
        text=text,
        user=message.user or "",
        ts=message.ts,
    )


@dataclass(frozen=True, slots=True)
class Recorded:
    """A recorded mention: its conversation, and whether its commander turn was handed to
    this process's outbox sender (claimed as it was inserted: delivered with no claim
    transaction; else the outbox must be looked at)."""

    conversation: ConversationRecord
    handed: bool = False


async def record_request(
    db: Database,
    now: datetime,
    *,
    team_id: str,
    thread_ts: str,
    message: Incoming,
    request: str,
    for_commander: bool,
    sender: OutboxSender | None = None,
) -> Recorded | None:
    """A person's mention: open (or find) the thread's conversation, store the message and,
    when `for_commander`, its commander turn – all or nothing. None: seen already.
    `sender`: this process's outbox sender, to hand the turn to (see `Recorded`)."""
    claimed: OutboxRecord | None = None
    turn: MessageForCommander | None = None
    until = now + sender.lease if sender is not None else now
    async with db.write() as conn:
        if not await conn.run_sync(record_event, f"msg:{message.channel}:{message.ts}", now):
            return None
        conversation = await open_conversation(
            conn,
            team_id=team_id,
            channel_id=message.channel,
            thread_ts=thread_ts,
            requested_by=message.user or "",
            request_text=request,
            now=now,
        )
        await store_message(conn, conversation.id, message.record(request), now)
        await record_received(conn, conversation.id, message.ts, message.files, now)
        if for_commander:
            turn = _turn(conversation.id, message, request)
            claimed = await _enqueue_turn(conn, turn, now, sender, until)
    return Recorded(conversation, _hand_over(sender, claimed, turn, until))


async def _enqueue_turn(
    conn: AsyncConnection,
    turn: MessageForCommander,
    now: datetime,
    sender: OutboxSender | None,
    until: datetime,
) -> OutboxRecord | None:
    """The turn's outbox row: claimed for `sender` until `until` (None: its key exists),
    else pending for any process."""
    if sender is None:
        await conn.run_sync(enqueue_effects, [to_row(turn)], now, ignore_duplicates=True)
        return None
    insert = enqueue_claimed_unless_present
    return await conn.run_sync(insert, to_row(turn), now, lease_until=until)


def _hand_over(
    sender: OutboxSender | None,
    claimed: OutboxRecord | None,
    turn: MessageForCommander | None,
    until: datetime,
) -> bool:
    """After the commit: the claimed turn handed to `sender`; whether it was."""
    if sender is None or claimed is None or turn is None:
        return False
    sender.hand_over([claimed], [turn], until)
    return True


async def record_reply(
    db: Database,
    now: datetime,
    conversation_id: int,
    message: Incoming,
    *,
    for_commander: bool,
    sender: OutboxSender | None = None,
) -> Literal["seen", "stored", "handed"]:
    """A message in a thread Flotilla works in: stored (with a commander turn when it is for
    the commander, handed to `sender` as `record_request` hands a mention's). "seen": it
    was stored already (a redelivered event)."""
    claimed: OutboxRecord | None = None
    turn: MessageForCommander | None = None
    until = now + sender.lease if sender is not None else now
    async with db.write() as conn:
        stored = await store_message(conn, conversation_id, message.record(), now)
        if stored:
            await record_received(conn, conversation_id, message.ts, message.files, now)
        if stored and for_commander:
            turn = _turn(conversation_id, message, message.text)
            claimed = await _enqueue_turn(conn, turn, now, sender, until)
    if not stored:
        return "seen"
    return "handed" if _hand_over(sender, claimed, turn, until) else "stored"


async def stored_result(
    db: Database, plan: Plan, step_index: int, attempt: int
) -> StepSucceeded | None:
    """The outcome of a step attempt whose run finished (its answer may have been posted by
    an agent's own app before a crash kept the outcome from being recorded)."""
    key = step_key(plan.id, step_index, attempt)
    async with db.read() as conn:
        run = await load_run(conn, key)
        files = [f.name for f in await produced_files(conn, run_key=key) if f.state == "shared"]
    if run is None or run.status != "finished":
        return None
    result = result_from_history(load_messages(run.messages))
    return StepSucceeded(index=step_index, attempt=attempt, summary=result.summary, files=files)


async def record_attachments(
    db: Database, now: datetime, conversation_id: int, where: str, files: tuple[ReceivedFile, ...]
) -> None:
    """Files that came with something other than a message (a form's answer), recorded with
    the conversation under `where` (the form's message); each once."""
    async with db.write() as conn:
        await record_received(conn, conversation_id, where, files, now)
