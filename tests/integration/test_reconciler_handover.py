"""A reconcile hands its effects to its process's outbox sender (SQLite's path): claimed in
the reconcile's own transaction, delivered without a claim transaction, marked sent by the
next transaction – and still exactly once across a crash."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event, select

from flotilla.agents.reconciling.outbox import Claimed, OutboxSender
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.storage.db import Database
from flotilla.storage.locks import sqlite_engine
from flotilla.storage.outbox import outbox_t
from tests.eventually import eventually
from tests.fakes.clock import FakeClock
from tests.integration.reconcile_support import (
    AGENTS,
    T0,
    RecordingPort,
    chain,
    finish_running,
    new_conversation,
    outbox_keys,
)


class Transactions:
    """Counts the transactions begun on both of the database's engines."""

    def __init__(self, db: Database) -> None:
        self.count = 0
        for engine in (db.engine.sync_engine, sqlite_engine(db)):
            event.listen(engine, "begin", self._begun)

    def _begun(self, *_: Any) -> None:
        self.count += 1


async def states(db: Database) -> set[tuple[str, str]]:
    async with db.read() as conn:
        rows = await conn.execute(select(outbox_t.c.kind, outbox_t.c.state))
        return {(str(kind), str(state)) for kind, state in rows}


async def test_a_step_is_two_transactions_with_its_effects_delivered(sqlite_db: Database) -> None:
    db = sqlite_db
    clock = FakeClock(T0)
    port = RecordingPort()
    sender = OutboxSender(db, port, clock=clock)
    reconciler = Reconciler(db, clock=clock, outbox=sender)
    cid = await new_conversation(db, "h.1")
    await reconciler.start_plan(cid, chain(4), assignees=AGENTS)
    await sender.drain(until_empty=False)
    counter = Transactions(db)
    for step in range(1, 4):
        before = counter.count
        await finish_running(reconciler, cid)  # its plan read is one more transaction
        await sender.drain(until_empty=False)
        # the plan read, the reconcile (which claims its effects and marks the last
        # deliveries sent), the drain's claim (finding nothing; it marks them sent)
        assert counter.count - before == 3, step
    performed = Counter(e.key for e in port.performed)
    assert max(performed.values()) == 1
    assert len([k for k in performed if ":step:" in k]) == 4  # every dispatch, once
    await sender.flush()
    assert await states(db) == {("post_dispatch", "sent"), ("update_plan_card", "sent")}


async def test_handed_rows_are_delivered_without_a_claim_and_cards_coalesce(
    db: Database,
) -> None:
    """The executor's path when a handover woke it: no transaction but the reconcile's."""
    clock = FakeClock(T0)
    port = RecordingPort()
    sender = OutboxSender(db, port, clock=clock)
    reconciler = Reconciler(db, clock=clock, outbox=sender)
    cid = await new_conversation(db, "h.3")
    await reconciler.start_plan(cid, chain(5), assignees=AGENTS)
    counter = Transactions(db) if db.is_sqlite else None
    await sender.deliver_handed()
    for _ in range(2):  # two changes before a delivery: one card refresh performed
        await finish_running(reconciler, cid)
    await sender.deliver_handed()
    if counter is not None:
        assert counter.count == 4  # two plan reads, two reconciles: no other transaction
    cards = [e for e in port.performed if e.kind == "update_plan_card"]
    assert len(cards) == 2  # the first plan's card, then one for the two changes
    await sender.flush()
    assert await states(db) == {("post_dispatch", "sent"), ("update_plan_card", "sent")}
    assert await sender.drain() == 0


async def test_a_handed_over_row_left_undelivered_is_claimed_after_its_lease(
    db: Database, tmp_path: Path
) -> None:
    """The process that committed the reconcile dies before delivering: the row is claimed
    for it (nobody else takes it) until the lease ran out, then delivered once, checked."""
    clock = FakeClock(T0)
    log = tmp_path / "thread.jsonl"
    dead = OutboxSender(db, RecordingPort(log), clock=clock)
    reconciler = Reconciler(db, clock=clock, outbox=dead)
    cid = await new_conversation(db, "h.2")
    await reconciler.start_plan(cid, chain(2), assignees=AGENTS)  # handed to `dead`, never sent
    other = OutboxSender(db, port := RecordingPort(log), clock=clock)
    await other.drain()
    assert port.performed == []  # the rows are claimed for the dead process
    clock.advance(dead.lease + timedelta(seconds=1))
    await other.drain()
    dispatches = [e for e in port.performed if e.kind == "post_dispatch"]
    assert len(dispatches) == 1 and dispatches[0].key in port.checked  # a redelivery: checked
    assert Counter(port.keys())[dispatches[0].key] == 1
    assert sorted(await outbox_keys(db)) == sorted(set(port.keys()))


async def test_a_row_handed_over_while_the_sender_is_busy_is_posted_once(db: Database) -> None:
    """Chaos experiment 3 (three dispatches posted twice): a reconcile hands a row over
    while the sender is still delivering earlier ones (paced posts after an outage), and
    those take longer than the row's claim. The sender's own claim then finds the row
    due and delivers it as a redelivery; the handed copy must not be performed as well."""
    clock = FakeClock(T0)
    performer = RecordingPort()
    sender = OutboxSender(db, performer, clock=clock)
    reconciler = Reconciler(db, clock=clock, outbox=sender)
    cid = await new_conversation(db, "h.4")
    await reconciler.start_plan(cid, chain(2), assignees=AGENTS)
    slow = True

    async def busy(claimed: Claimed) -> bool:
        nonlocal slow
        if slow and claimed.effect.kind == "post_dispatch":  # step 1's dispatch
            slow = False
            await finish_running(reconciler, cid)  # step 2 handed over meanwhile …
            clock.advance(sender.lease + timedelta(seconds=1))  # … and this post is slow
        return await performer(claimed)

    sender.perform = busy
    await sender.drain()
    await sender.drain()
    performed = Counter(e.key for e in performer.performed if e.kind == "post_dispatch")
    assert len(performed) == 2  # both steps' dispatches …
    assert max(performed.values()) == 1  # … each posted once


async def test_a_handed_over_row_whose_claim_ran_out_is_left_to_the_replica_that_took_it(
    db: Database, tmp_path: Path
) -> None:
    """The process the row was handed to gets to it only after its claim ran out and
    another replica claimed and posted it: it does not post it again."""
    clock = FakeClock(T0)
    log = tmp_path / "thread.jsonl"
    slow = OutboxSender(db, slow_port := RecordingPort(log), clock=clock)
    reconciler = Reconciler(db, clock=clock, outbox=slow)
    cid = await new_conversation(db, "h.5")
    await reconciler.start_plan(cid, chain(2), assignees=AGENTS)  # handed to `slow`
    clock.advance(slow.lease + timedelta(seconds=1))
    other = OutboxSender(db, RecordingPort(log), clock=clock)
    await other.drain()  # claims the rows whose claim ran out, posts them
    await slow.drain()  # reaches its handed rows only now
    assert [e for e in slow_port.performed if e.kind == "post_dispatch"] == []
    assert max(Counter(RecordingPort(log).keys()).values()) == 1


async def test_a_delivery_waiting_longer_than_its_claim_keeps_the_row(
    db: Database, tmp_path: Path
) -> None:
    """Chaos experiment 1 (three replicas, 5 s leases, posts queued one a second in a busy
    channel): a delivery still waiting for its turn when its claim would run out renews
    the claim, so another replica does not claim the row and post it as well."""
    clock = FakeClock(T0)
    log = tmp_path / "thread.jsonl"
    lease = timedelta(seconds=0.4)
    queued = RecordingPort(log)
    slow = OutboxSender(db, queued, clock=clock, lease=lease)
    reconciler = Reconciler(db, clock=clock)  # effects wait in the outbox for a claim
    cid = await new_conversation(db, "h.6")
    await reconciler.start_plan(cid, chain(2), assignees=AGENTS)
    turn = asyncio.Event()
    waiting = asyncio.Event()

    async def post_in_turn(claimed: Claimed) -> bool:
        if claimed.effect.kind == "post_dispatch":
            waiting.set()
            await turn.wait()  # the channel's queue
        return await queued(claimed)

    slow.perform = post_in_turn
    delivering = asyncio.create_task(slow.drain())
    await waiting.wait()
    clock.advance(lease * 0.75)
    await renewed(db, beyond=clock.now + lease * 0.5)
    clock.advance(lease * 0.5)  # past the first claim, within the renewed one
    other = OutboxSender(db, RecordingPort(log), clock=clock, lease=lease)
    await other.drain()
    turn.set()
    await delivering
    assert max(Counter(RecordingPort(log).keys()).values()) == 1


async def renewed(db: Database, *, beyond: datetime) -> None:
    """Until the dispatch's row is claimed beyond `beyond` (at most a few seconds: the
    test then shows what happens without a renewal)."""

    async def claimed_beyond() -> bool:
        async with db.read() as conn:
            due = await conn.scalar(
                select(outbox_t.c.available_at).where(outbox_t.c.kind == "post_dispatch")
            )
        return due is not None and due.replace(tzinfo=beyond.tzinfo) > beyond

    with contextlib.suppress(AssertionError):
        await eventually(claimed_beyond, 3, what="the dispatch's claim renewed")


async def test_a_row_claimed_again_before_its_mark_landed_is_not_performed_again(
    db: Database,
) -> None:
    """A sender's delivered rows are marked sent by a later transaction; should a claim take
    one first (its mark was in flight, or lost), the sender marks it, never performs it
    again – e.g. a form's answer shown by its click must not be rewritten once more."""
    clock = FakeClock(T0)
    port = RecordingPort()
    sender = OutboxSender(db, port, clock=clock)
    reconciler = Reconciler(db, clock=clock, outbox=sender)
    cid = await new_conversation(db, "h.again")
    await reconciler.start_plan(cid, chain(2), assignees=AGENTS)
    await sender.deliver_handed()  # performed; marked sent by the sender's next transaction
    performed = len(port.performed)
    assert performed and sender.take_sent()  # the marks taken away: the rows stay pending
    clock.advance(sender.lease + timedelta(seconds=1))  # their claims ran out: due again
    assert await sender.drain() > 0  # claimed again...
    assert len(port.performed) == performed  # ...and not performed again,
    assert port.checked == []  # nor looked for in the thread as a redelivery would be
    await sender.flush()
    assert {state for _, state in await states(db)} == {"sent"}


async def test_a_reconcile_that_finds_no_plan_keeps_the_senders_marks(db: Database) -> None:
    """The sender's delivered rows ride on the next reconcile to be marked sent; one that
    finds no plan writes nothing, so the marks wait for the next transaction."""
    clock = FakeClock(T0)
    sender = OutboxSender(db, RecordingPort(), clock=clock)
    reconciler = Reconciler(db, clock=clock, outbox=sender)
    cid = await new_conversation(db, "h.marks")
    await reconciler.start_plan(cid, chain(2), assignees=AGENTS)
    await sender.deliver_handed()
    empty = await new_conversation(db, "h.empty")  # a conversation without a plan
    assert await reconciler.reconcile(empty, event_key="nothing") is None
    await sender.flush()
    assert {state for _, state in await states(db)} == {"sent"}
