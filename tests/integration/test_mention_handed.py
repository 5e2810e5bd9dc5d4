"""A mention's commander turn is inserted already claimed by the process that recorded it
and handed to its outbox sender (as a reconcile hands over what it decides): delivered with
no claim transaction and no wait for a poll, and still exactly once – another sender finds
nothing due while the lease holds, and takes it once the lease expired (a killed process)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select

from flotilla.agents.planning.effects import MessageForCommander
from flotilla.agents.reconciling.inbox import Incoming, Recorded, record_reply, record_request
from flotilla.agents.reconciling.outbox import OutboxSender
from flotilla.storage.db import Database
from flotilla.storage.outbox import enqueue_claimed_unless_present, enqueue_effects, outbox_t
from tests.fakes.clock import FakeClock
from tests.integration.reconcile_support import T0, RecordingPort, outbox_keys


async def _mention(
    db: Database, clock: FakeClock, sender: OutboxSender | None, ts: str = "1.0"
) -> Recorded | None:
    return await record_request(
        db,
        clock(),
        team_id="T1",
        thread_ts=ts,
        message=Incoming(channel="C1", ts=ts, text="<@UCMD> plan a launch", user="U1"),
        request="plan a launch",
        for_commander=True,
        sender=sender,
    )


async def test_a_mention_s_turn_is_handed_over_claimed_and_performed_once(db: Database) -> None:
    clock = FakeClock(T0)
    port = RecordingPort()
    sender = OutboxSender(db, port, clock=clock)
    recorded = await _mention(db, clock, sender)
    assert recorded is not None and recorded.handed and sender.handed == 1
    other_port = RecordingPort()
    other = OutboxSender(db, other_port, clock=clock)
    assert await other.drain() == 0  # claimed for the recording process's lease
    assert await sender.deliver_handed() == 1
    assert [type(e) for e in port.performed] == [MessageForCommander]
    assert await _mention(db, clock, sender) is None  # the same event again: nothing
    assert sender.handed == 0 and other_port.performed == []


async def test_a_turn_handed_to_a_process_that_died_is_taken_once_its_lease_expired(
    db: Database,
) -> None:
    clock = FakeClock(T0)
    dead = OutboxSender(db, RecordingPort(), clock=clock)
    recorded = await _mention(db, clock, dead)
    assert recorded is not None and recorded.handed  # …and never delivered: killed
    port = RecordingPort()
    other = OutboxSender(db, port, clock=clock)
    assert await other.drain() == 0
    clock.advance(dead.lease + timedelta(seconds=1))
    assert await other.drain() == 1
    assert [type(e) for e in port.performed] == [MessageForCommander]


async def test_without_a_sender_the_turn_waits_in_the_outbox_for_any(db: Database) -> None:
    clock = FakeClock(T0)
    recorded = await _mention(db, clock, None)  # a stopping process hands nothing over
    assert recorded is not None and not recorded.handed
    port = RecordingPort()
    assert await OutboxSender(db, port, clock=clock).drain() == 1


async def test_a_claimed_insert_of_a_key_that_exists_inserts_nothing(db: Database) -> None:
    clock = FakeClock(T0)
    row: dict[str, Any] = {
        "idempotency_key": "k1",
        "kind": "commander_turn",
        "conversation_id": None,
        "payload": {},
    }
    async with db.write() as conn:
        await conn.run_sync(enqueue_effects, [row], clock())
        again = await conn.run_sync(
            enqueue_claimed_unless_present, row, clock(), lease_until=clock() + timedelta(30)
        )
        attempts = (await conn.execute(select(outbox_t.c.attempts))).scalars().all()
    assert again is None and attempts == [0]
    assert await outbox_keys(db) == ["k1"]


async def test_an_interjection_s_turn_is_handed_over_the_same_way(db: Database) -> None:
    clock = FakeClock(T0)
    port = RecordingPort()
    sender = OutboxSender(db, port, clock=clock)
    recorded = await _mention(db, clock, None)
    assert recorded is not None
    await OutboxSender(db, RecordingPort(), clock=clock).drain()  # the mention's turn: done
    reply = Incoming(channel="C1", ts="2.0", text="make it short", user="U1")
    cid = recorded.conversation.id
    assert await record_reply(db, clock(), cid, reply, for_commander=True, sender=sender) == (
        "handed"
    )
    assert await OutboxSender(db, RecordingPort(), clock=clock).drain() == 0  # claimed here
    assert await sender.deliver_handed() == 1
    assert [e.text for e in port.performed if isinstance(e, MessageForCommander)] == [
        "make it short"
    ]
    again = await record_reply(db, clock(), cid, reply, for_commander=True, sender=sender)
    assert again == "seen" and sender.handed == 0  # a redelivered event: nothing
    later = Incoming(channel="C1", ts="3.0", text="thanks", user="U2")
    assert await record_reply(db, clock(), cid, later, for_commander=False, sender=sender) == (
        "stored"
    )
