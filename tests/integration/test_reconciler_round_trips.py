"""Round trips per reconcile on a real PostgreSQL, counted on the wire (`tests/wire_proxy.py`).

A reconcile that records a step's result and dispatches the next step is at most
`MAX_ROUND_TRIPS` protocol round trips once the connection's statements are prepared:
the plan read with the conversation's lock version, then one statement writing the
event record, the steps, the plan, the outbox rows and the version. Skips without
`FLOTILLA_TEST_POSTGRES_URL`, fails under CI when it is missing (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from flotilla.agents.planning.plan import StepSucceeded
from flotilla.agents.reconciling.outbox import OutboxSender
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.storage.db import Database
from flotilla.storage.migrate import upgrade
from tests.conftest import PostgresSchema, postgres_url
from tests.fakes.clock import FakeClock
from tests.integration.reconcile_support import (
    AGENTS,
    T0,
    RecordingPort,
    chain,
    diamond,
    new_conversation,
)
from tests.wire_proxy import WireProxy

MAX_ROUND_TRIPS = 3

pytestmark = pytest.mark.postgres


@pytest.fixture
async def proxied() -> AsyncIterator[tuple[Database, WireProxy]]:
    base = postgres_url()
    parts = urlsplit(base)
    schema = PostgresSchema(base)
    await schema.create()
    try:
        async with WireProxy(parts.hostname or "127.0.0.1", parts.port or 5432) as proxy:
            db = Database(
                proxy.url(base), connect_args={"server_settings": {"search_path": schema.name}}
            )
            await upgrade(db)
            try:
                yield db, proxy
            finally:
                await db.dispose()
    finally:
        await schema.drop()


async def step_round_trips(reconciler: Reconciler, proxy: WireProxy, cid: int) -> list[int]:
    """Finish the plan's steps one reconcile at a time; the round trips of each."""
    plan = await reconciler.plan(cid)
    assert plan is not None
    counts = []
    while plan.status == "running":
        running = [s for s in plan.steps if s.status == "in_progress"]
        outcomes = [StepSucceeded(index=s.index, attempt=s.attempts, summary="ok") for s in running]
        before = proxy.round_trips
        decision = await reconciler.reconcile(
            cid, event_key=f"done:{cid}:{running[0].index}", outcomes=outcomes
        )
        counts.append(proxy.round_trips - before)
        assert decision is not None and decision.changed
        plan = decision.plan
    assert plan.status == "completed"
    return counts


async def test_a_reconcile_is_at_most_three_round_trips(
    proxied: tuple[Database, WireProxy],
) -> None:
    db, proxy = proxied
    reconciler = Reconciler(db, clock=FakeClock(T0))
    warm = await new_conversation(db, "rt.0")
    await reconciler.start_plan(warm, chain(3), assignees=AGENTS)
    await step_round_trips(reconciler, proxy, warm)  # prepares the statements

    for thread, shape in (("rt.1", chain(5)), ("rt.2", diamond())):
        cid = await new_conversation(db, thread)
        await reconciler.start_plan(cid, shape, assignees=AGENTS, max_parallel=2)
        counts = await step_round_trips(reconciler, proxy, cid)
        assert counts and max(counts) <= MAX_ROUND_TRIPS, counts


async def test_a_repeated_event_is_applied_once_in_at_most_three_round_trips(
    proxied: tuple[Database, WireProxy],
) -> None:
    db, proxy = proxied
    reconciler = Reconciler(db, clock=FakeClock(T0))
    cid = await new_conversation(db, "rt.3")
    await reconciler.start_plan(cid, chain(3), assignees=AGENTS)
    outcome = StepSucceeded(index=1, attempt=1, summary="ok")
    first = await reconciler.reconcile(cid, event_key="done:1", outcomes=[outcome])
    assert first is not None and first.changed
    before = proxy.round_trips
    again = await reconciler.reconcile(cid, event_key="done:1", outcomes=[outcome])
    assert proxy.round_trips - before <= MAX_ROUND_TRIPS
    assert again is not None and not again.changed
    plan = await reconciler.plan(cid)
    assert plan is not None and [s.status for s in plan.steps][:2] == ["done", "in_progress"]


async def test_a_step_with_its_effects_delivered_is_at_most_three_round_trips(
    proxied: tuple[Database, WireProxy],
) -> None:
    """With the process's sender wired (as the executor wires it), the effects are claimed in
    the reconcile's own statement and delivered without a claim: no round trip more."""
    db, proxy = proxied
    clock = FakeClock(T0)
    port = RecordingPort()
    sender = OutboxSender(db, port, clock=clock)
    reconciler = Reconciler(db, clock=clock, outbox=sender)
    for thread in ("rt.4", "rt.5"):  # the first prepares the statements
        cid = await new_conversation(db, thread)
        await reconciler.start_plan(cid, chain(4), assignees=AGENTS)
        await sender.deliver_handed()
        plan = await reconciler.plan(cid)
        counts = []
        while plan is not None and plan.status == "running":
            running = [s for s in plan.steps if s.status == "in_progress"]
            outcome = StepSucceeded(index=running[0].index, attempt=1, summary="ok")
            before = proxy.round_trips
            decision = await reconciler.reconcile(
                cid, event_key=f"done:{cid}:{outcome.index}", outcomes=[outcome]
            )
            await sender.deliver_handed()
            counts.append(proxy.round_trips - before)
            assert decision is not None
            plan = decision.plan
    assert counts and max(counts) <= MAX_ROUND_TRIPS, counts
    await sender.flush()
    assert len([e for e in port.performed if e.kind == "post_dispatch"]) == 8
    assert await sender.drain() == 0  # all delivered, all marked sent
