"""An admission loop stops when asked, even when it is woken in the same instant – on
SQLite and PostgreSQL.

Why this failed before (found through `bench/scheduler.py`, which "sometimes stalled with
an idle event loop"): the loop waited for its next wake-up with
`asyncio.wait_for(event.wait(), poll_seconds)`. On Python 3.11, when the loop's task is
cancelled in the same instant as the event is set (a run asked for a slot, or a job freed
one, just as the process stops), `wait_for` returns normally and the cancellation is lost
(CPython gh-86296, fixed in 3.12). The loop went on polling every `poll_seconds`, so
`AdmissionLoop.stop()` – and with it `Executor.stop()`, `Executor.abandon()` and a
service's shutdown – waited for ever. The outbox loop (`Executor._deliver_forever`) waited
the same way. Both now wait with `agents.core.clock.woken`, which keeps a cancellation from
outside apart from its own timeout.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from flotilla.agents.core.clock import utcnow
from flotilla.agents.scheduling.admission import AdmissionLoop
from flotilla.agents.scheduling.admission_policy import SchedulerOptions
from flotilla.storage.db import Database
from flotilla.storage.records import RunRequestRecord
from flotilla.storage.run_requests import get_request
from tests.eventually import eventually

BOUND = 10.0  # seconds: a bound on a hung stop, never a sleep


async def _start(record: RunRequestRecord) -> None:
    return None


async def _show(conversation_id: int, plan_id: int) -> None:
    return None


async def _refuse(record: RunRequestRecord, reason: str) -> None:
    return None


def admission_loop(db: Database) -> AdmissionLoop:
    # a long poll: only a wake-up or the stop can end its wait
    options = SchedulerOptions(capacity=0, process_capacity=0, poll_seconds=3600.0)
    return AdmissionLoop(
        db,
        owner="p1",
        team_id=lambda: "T1",
        clock=utcnow,
        options=options,
        lease=timedelta(seconds=30),
        start=_start,
        show_waits=_show,
        refuse=_refuse,
    )


async def idle(loop: AdmissionLoop) -> None:
    """Until the loop ran its first pass and waits for a wake-up."""
    loop.start()
    await eventually(lambda: loop.passes >= 1, BOUND, what="the loop's first pass")
    await loop.run_pass()  # waits for the loop's own pass; the loop then waits


async def stopped_within_bound(loop: AdmissionLoop) -> bool:
    try:
        async with asyncio.timeout(BOUND):
            await loop.stop()  # a second cancellation (the timeout's) ends a swallowed one
    except TimeoutError:
        return False
    return True


async def test_a_loop_woken_as_it_is_stopped_stops(db: Database) -> None:
    loop = admission_loop(db)
    await idle(loop)
    passes = loop.passes
    loop.wake()  # e.g. a job freed its slot just as the process stops
    assert await stopped_within_bound(loop), "stop() hung: the cancellation was swallowed"
    assert loop.passes == passes  # it stopped instead of running another pass


async def test_a_loop_stopped_just_after_a_run_asked_for_a_slot_stops(db: Database) -> None:
    loop = admission_loop(db)
    await idle(loop)
    state = await loop.enqueue(  # commits, then wakes the loop
        run_key="run:1",
        effect_key="outbox:1",
        effect_kind="post_dispatch",
        effect={},
        conversation_id=None,
        team_id="T1",
        channel_id="C1",
        agent_name="researcher",
        plan_id=None,
        step_index=None,
        attempt=None,
        priority=3,
        estimate_tokens=0,
        tools=[],
    )
    assert state == "waiting"
    assert await stopped_within_bound(loop), "stop() hung: the cancellation was swallowed"
    async with db.read() as conn:  # the request is kept for the next process to grant
        request = await get_request(conn, "run:1")
    assert request is not None and request.state == "waiting"
