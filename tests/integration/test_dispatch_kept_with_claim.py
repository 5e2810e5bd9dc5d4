"""A step's dispatch message is kept in the transaction that claims its run (issue 17), on
SQLite and PostgreSQL: once, with its Slack ts, in Slack's order – even when the process
dies right after Slack accepted the post (the redelivery finds it in the thread: kept,
not posted twice) or the claim is delivered again.

Why the crash case failed before (commit 4f52c9b): the message was posted and then kept
in a transaction of its own (`SlackPort.say`); a process killed between the two left it
in Slack only, and the redelivery, finding it in the thread (`thread_has_key`), posted
nothing and kept nothing – the step's run and every later turn read a thread without it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.planning.effects import step_key
from flotilla.agents.running import offline
from flotilla.agents.running.slot_requests import SlotRequest, claim_slot
from flotilla.agents.scheduling.admission_policy import FastPath
from flotilla.bot.identities import Poster
from flotilla.bot.listeners.payloads import DISPATCH_EVENT
from flotilla.bot.local import start_local_stack
from flotilla.bot.service import Options
from flotilla.local_slack import Driver
from flotilla.storage.conversations import open_conversation, store_message, thread_messages
from flotilla.storage.db import Database
from flotilla.storage.records import ConversationRecord, MessageRecord
from tests.fakes.clock import FakeClock
from tests.integration.test_executor_leases import (
    LEASE,
    REQUEST,
    Counting,
    Processes,
    ran,
)

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=30)


class DiesAfterTheDispatchPost:
    """Flotilla's poster, except that once Slack accepted step 1's dispatch message the
    process dies there (it hangs until abandoned, as by kill -9): posted, not kept, its
    run not claimed."""

    def __init__(self, poster: Poster) -> None:
        self.poster = poster
        self.posted = asyncio.Event()

    async def post(self, **kwargs: Any) -> str:
        ts = await self.poster.post(**kwargs)
        meta = kwargs.get("metadata") or {}
        if meta.get("event_type") == DISPATCH_EVENT and meta["event_payload"]["step"] == 1:
            if not self.posted.is_set():
                self.posted.set()
                await asyncio.Event().wait()  # dead
        return ts

    def __getattr__(self, name: str) -> Any:
        return getattr(self.poster, name)


@pytest.fixture
async def process(db: Database) -> AsyncIterator[Processes]:
    clock = FakeClock(datetime.now(UTC))
    stack = await start_local_stack(
        db,
        options=Options(lease_seconds=LEASE.total_seconds(), heartbeat_seconds=5.0),
        ack_timeout=2.0,
        retry_delays=(0.0, 0.05, 0.05),
        clock=clock,
        model=offline.offline_model(),
    )
    stack.service.context.observer = Counting(stack.service.metrics)
    try:
        yield Processes(stack, Driver(stack.workspace, default_timeout=20.0), clock)
    finally:
        await stack.stop()


async def kept_dispatches(p: Processes, key: str) -> list[MessageRecord]:
    """The thread's kept messages carrying the dispatch of `key`."""
    conversation_id = (await p.plan()).conversation_id
    async with p.service.db.read() as conn:
        thread = await thread_messages(conn, conversation_id)
    return [
        m
        for m in thread
        if (m.metadata or {}).get("event_type") == DISPATCH_EVENT
        and m.metadata is not None
        and m.metadata["event_payload"]["key"] == key
    ]


async def test_killed_after_the_dispatch_post_the_redelivery_keeps_it_and_posts_nothing(
    process: Processes,
) -> None:
    p = process
    a = p.service
    dies = DiesAfterTheDispatchPost(a.context.port.poster)  # type: ignore[attr-defined]
    a.context.port.poster = cast(Poster, dies)  # type: ignore[attr-defined]
    p.root = p.driver.mention("maya", "launch", p.stack.commander, REQUEST)
    await asyncio.wait_for(dies.posted.wait(), 20)
    key = step_key((await p.plan()).id, 1, 1)
    assert p.dispatches() == [(1, 1)]  # in Slack...
    assert await kept_dispatches(p, key) == []  # ...not kept: the process died there

    b = await p.crash_and_replace(offline.offline_model())
    held = await p.held(key)
    assert held.lease_owner is None  # its run was never claimed
    p.clock.now = held.row_due  # the row comes due again: B delivers it a second time
    await b.settle()
    await p.completed_once()  # posted once: the dispatches are [(1, 1), (2, 1)]
    assert ran(b) == ["researcher", "writer", "commander"]

    in_slack = [
        (m.ts, m.text, m.metadata)
        for m in p.driver.thread("launch", p.root.ts)
        if (m.metadata or {}).get("event_type") == DISPATCH_EVENT
        and (m.metadata or {})["event_payload"]["key"] == key
    ]
    kept = await kept_dispatches(p, key)
    # kept once, as Slack shows it: its ts, text and metadata, by Flotilla's bot
    assert [(m.ts, m.text, m.metadata) for m in kept] == in_slack
    assert kept[0].bot_id == b.port.bot_id is not None


def slot_values(conversation_id: int, key: str) -> dict[str, Any]:
    return dict(
        effect_key=key,
        effect_kind="post_dispatch",
        effect={"a": [1]},
        conversation_id=conversation_id,
        team_id="T1",
        channel_id="C1",
        agent_name="researcher",
        plan_id=None,
        step_index=None,
        attempt=None,
        priority=3,
        estimate_tokens=10,
        tools=[],
    )


async def a_posted_dispatch(db: Database) -> tuple[ConversationRecord, str, MessageRecord]:
    """A conversation, its step's key, and the step's dispatch message as posted (not kept)."""
    async with db.write() as conn:
        conversation = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts="1764849600.000100",
            requested_by="U1",
            request_text="research it",
            now=NOW,
        )
    key = "plan:1:step:1:attempt:1"
    payload = {"plan_id": 1, "step": 1, "attempt": 1, "key": key}
    dispatch = MessageRecord(
        "C1",
        "1764849601.000200",
        "UBOT",
        "BBOT",
        "Flotilla",
        "<@UR> research it",
        {"event_type": DISPATCH_EVENT, "event_payload": payload},
    )
    return conversation, key, dispatch


async def test_a_claim_delivered_again_keeps_the_dispatch_once_in_slack_order(
    db: Database,
) -> None:
    conversation, key, dispatch = await a_posted_dispatch(db)
    # a person wrote in the thread after the post and before the claim: kept first
    person = MessageRecord("C1", "1764849602.000300", "U1", None, "maya", "and X", None)
    async with db.write() as conn:
        assert await store_message(conn, conversation.id, person, NOW)

    seen: list[list[str]] = []

    async def run_reads(conn: AsyncConnection) -> None:  # the run's reads, in the claim
        seen.append([m.ts for m in await thread_messages(conn, conversation.id)])

    slot = SlotRequest(key, slot_values(conversation.id, key), FastPath(2, 2, None), dispatch)
    assert await claim_slot(db, slot, "p1", now=NOW, until=LATER, also=run_reads) == "mine"
    # delivered again (another process, after a crash): the run is p1's, the message kept
    again = await claim_slot(db, slot, "p2", now=NOW, until=LATER, also=run_reads)
    assert again == "elsewhere"

    async with db.read() as conn:
        thread = await thread_messages(conn, conversation.id)
    assert thread == [dispatch, person]  # once, in Slack's order (not the order kept)
    if db.is_sqlite:  # the run read the thread in the claim, its dispatch message in it
        assert seen == [[dispatch.ts, person.ts]]
    else:  # PostgreSQL: the run reads after the claim (not under the admission lock)
        assert seen == []


async def test_a_claim_whose_facts_read_fails_leaves_nothing_and_is_claimed_again(
    db: Database,
) -> None:
    """A request asked while the admission facts were not kept reads them in its claim
    (`SlotRequest.complete`): the database failing there rolls the whole claim back – no
    request, no message kept on SQLite (on PostgreSQL it was kept just before, once) – and
    the claim delivered again (its outbox row come due) completes it, keeping the dispatch
    message once."""
    from dataclasses import replace

    from sqlalchemy.exc import OperationalError

    from flotilla.storage.run_requests import get_request

    conversation, key, dispatch = await a_posted_dispatch(db)
    values = slot_values(conversation.id, key)
    asked = {k: v for k, v in values.items() if k not in ("priority", "estimate_tokens", "tools")}
    complete = SlotRequest(key, values, FastPath(2, 2, None))

    async def away(conn: AsyncConnection) -> SlotRequest:
        await thread_messages(conn, conversation.id)  # reading, when the database goes
        raise OperationalError("SELECT workspaces", {}, ConnectionError("the database is away"))

    async def facts(conn: AsyncConnection) -> SlotRequest:
        await thread_messages(conn, conversation.id)  # the facts' read, in the claim
        return complete

    slot = SlotRequest(key, asked, None, dispatch, complete=away)
    with pytest.raises(OperationalError):
        await claim_slot(db, slot, "p1", now=NOW, until=LATER)
    async with db.read() as conn:
        assert await get_request(conn, key) is None
        kept = await thread_messages(conn, conversation.id)
    assert kept == ([] if db.is_sqlite else [dispatch])

    again = replace(slot, complete=facts)  # delivered again: found in the thread, kept
    assert await claim_slot(db, again, "p1", now=NOW, until=LATER) == "mine"
    async with db.read() as conn:
        request = await get_request(conn, key)
        assert await thread_messages(conn, conversation.id) == [dispatch]  # once
    assert request is not None and request.priority == 3 and request.estimate_tokens == 10
