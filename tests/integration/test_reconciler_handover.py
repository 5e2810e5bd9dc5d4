"""A reconcile hands its effects to its process's outbox sender (SQLite's path): claimed in
the reconcile's own transaction, delivered without a claim transaction, marked sent by the
next transaction – and still exactly once across a crash."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select

from agents.outbox import Claimed, OutboxSender
from agents.reconciler import Reconciler
from storage.db import Database
from storage.locks import sqlite_engine
from storage.migrate import upgrade
from storage.plans import outbox_t
from tests.integration.reconcile_support import (
    AGENTS,
    Clock,
    RecordingPort,
    chain,
    finish_running,
    new_conversation,
    outbox_keys,
)


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> Database:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'flotilla.db'}")
    await upgrade(db)
    return db


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
    clock = Clock()
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
    clock = Clock()
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
    clock = Clock()
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


async def test_a_handed_over_row_whose_lease_ran_out_waiting_is_delivered_once(
    sqlite_db: Database,
) -> None:
    """A row handed over while a long (paced) delivery was under way waits here past its
    lease: the claim that takes it then delivers it as a redelivery (checked first), and
    the handover never delivers it again as new (found by the chaos suite: a dispatch
    posted twice)."""
    db = sqlite_db
    clock = Clock()
    port = RecordingPort()
    cid = await new_conversation(db, "h.4")
    first = True

    async def perform(claimed: Claimed) -> bool:
        nonlocal first
        done = await port(claimed)
        if first and claimed.effect.kind == "post_dispatch":
            first = False  # a step finishes while this delivery is under way...
            await finish_running(reconciler, cid)
            clock.advance(sender.lease + timedelta(seconds=1))  # ...which outlasts a lease
        return done

    sender = OutboxSender(db, perform, clock=clock)
    reconciler = Reconciler(db, clock=clock, outbox=sender)
    await reconciler.start_plan(cid, chain(3), assignees=AGENTS)
    await sender.drain()
    performed = Counter(e.key for e in port.performed)
    assert max(performed.values()) == 1, performed
    second = next(k for k in performed if ":step:2:" in k)
    assert second in port.checked  # delivered by the claim, as a redelivery
    await sender.flush()
    assert await states(db) <= {("post_dispatch", "sent"), ("update_plan_card", "sent")}
