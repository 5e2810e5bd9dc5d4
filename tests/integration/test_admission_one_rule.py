"""Admission is decided by one rule: the pure scheduler (`agents/scheduling/scheduler.py`).

Two statements apply it without an admission pass, for speed – a request granted as it is
written while nobody waits (`grant_at_once`), and a batch run asked whether urgent work
waits for its slot (`urgent_waits`). These properties run both statements against stored
queues, on SQLite and PostgreSQL, and require the exact answer the pure rule gives for the
same queue: `admit` with the request alone in line, and `may_yield` over the waiters.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import delete

from flotilla.agents.scheduling.admission_policy import SchedulerOptions, fast_path
from flotilla.agents.scheduling.scheduler import (
    PREEMPTIBLE_FROM,
    URGENT,
    Limits,
    Running,
    RunRequest,
    admit,
    may_yield,
    with_room,
)
from flotilla.storage.db import Database
from flotilla.storage.migrate import upgrade
from flotilla.storage.run_request_leases import grant_at_once, urgent_waits
from flotilla.storage.run_requests import (
    enqueue_request,
    grant_request,
    lock_admission,
    requests_t,
    requeue_request,
    set_wait_reasons,
)
from tests.conftest import BACKENDS, PostgresSchema, postgres_url

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ME = "p1"
AGENTS = ("researcher", "analyst")


@dataclass(frozen=True)
class Held:
    agent: str
    holder: str
    live: bool  # False: its holder died and its lease ran out


@dataclass(frozen=True)
class Waiter:
    priority: int
    kind: str | None  # what the last pass said it waits for (None: no pass saw it yet)
    paused: bool  # paused for urgent work (it waits again in its place)


@pytest.fixture(scope="module", params=BACKENDS)
def stored(request: pytest.FixtureRequest) -> Iterator[tuple[asyncio.Runner, Database]]:
    """One migrated database per backend for all examples (each example empties the
    queue first), with the event loop its statements run on."""
    with asyncio.Runner() as runner, tempfile.TemporaryDirectory() as tmp:
        schema: PostgresSchema | None = None
        if request.param == "sqlite":
            db = Database(f"sqlite+aiosqlite:///{Path(tmp) / 'flotilla.db'}")
        else:
            schema = PostgresSchema(postgres_url())
            runner.run(schema.create())
            db = schema.database()
        try:
            runner.run(upgrade(db))
            yield runner, db
        finally:
            runner.run(db.dispose())
            if schema is not None:
                runner.run(schema.drop())


def values(key: str, agent: str, priority: int = 3) -> dict[str, Any]:
    return dict(
        effect_key=f"dispatch:{key}",
        effect_kind="post_dispatch",
        effect={},
        conversation_id=None,
        team_id="T1",
        channel_id="C1",
        agent_name=agent,
        plan_id=None,
        step_index=None,
        attempt=None,
        priority=priority,
        estimate_tokens=10,
        tools=[],
    )


async def store_queue(
    db: Database, held: list[Held], waiters: list[Waiter], held_priority: int = 3
) -> None:
    async with db.write() as conn:
        await conn.execute(delete(requests_t))
        for n, run in enumerate(held):
            key = f"held{n}"
            await enqueue_request(conn, run_key=key, now=NOW, **values(key, run.agent))
            await conn.execute(
                requests_t.update()
                .where(requests_t.c.run_key == key)
                .values(priority=held_priority)
            )
            until = NOW + (timedelta(seconds=30) if run.live else -timedelta(seconds=1))
            assert await grant_request(conn, key, run.holder, now=NOW, until=until)
        for n, waiter in enumerate(waiters):
            key = f"wait{n}"
            await enqueue_request(conn, run_key=key, now=NOW, **values(key, "analyst"))
            await conn.execute(
                requests_t.update()
                .where(requests_t.c.run_key == key)
                .values(priority=waiter.priority)
            )
            if waiter.paused:
                assert await grant_request(conn, key, ME, now=NOW, until=NOW)
                await requeue_request(conn, key, ME, preempted=True)
            if waiter.kind is not None:
                await set_wait_reasons(conn, [(key, waiter.kind, "waiting: …")])


helds = st.lists(
    st.builds(Held, st.sampled_from(AGENTS), st.sampled_from((ME, "p2")), st.booleans()),
    max_size=6,
)
waiter_lists = st.lists(
    st.builds(
        Waiter,
        st.integers(1, 5),
        st.sampled_from((None, "capacity", "agent", "tool", "budget")),
        st.booleans(),
    ),
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(
    held=helds,
    someone_waits=st.booleans(),
    agent=st.sampled_from(AGENTS),
    capacity=st.integers(1, 5),
    process_capacity=st.integers(1, 4),
    agent_cap=st.none() | st.integers(1, 3),
)
def test_a_request_is_granted_at_once_exactly_when_admit_grants_it_alone(
    stored: tuple[asyncio.Runner, Database],
    held: list[Held],
    someone_waits: bool,
    agent: str,
    capacity: int,
    process_capacity: int,
    agent_cap: int | None,
) -> None:
    runner, db = stored
    caps = {agent: agent_cap} if agent_cap is not None else {}
    options = SchedulerOptions(
        capacity=capacity, process_capacity=process_capacity, agent_caps=caps
    )
    fast = fast_path(options, agent, ())
    assert fast is not None  # no budget, no tool quota: the statement may grant it

    async def granted() -> bool:
        waiters = [Waiter(3, "capacity", False)] if someone_waits else []
        await store_queue(db, held, waiters)
        async with db.write() as conn:
            await lock_admission(conn)
            return await grant_at_once(
                conn,
                run_key="new",
                owner=ME,
                now=NOW,
                until=NOW + timedelta(seconds=30),
                capacity=fast.capacity,
                process_capacity=fast.process_capacity,
                agent_cap=fast.agent_cap,
                **values("new", agent),
            )

    live = [run for run in held if run.live]  # a pass expires the others first
    running = [
        Running(f"held{n}", "T1:C1", run.agent, NOW, workspace="T1") for n, run in enumerate(live)
    ]
    here = sum(1 for run in live if run.holder == ME)
    limits = with_room(Limits(capacity, agent_caps=caps), len(running), here, process_capacity)
    alone = RunRequest("new", "T1:C1", agent, NOW, workspace="T1")
    admitted = admit([alone], running, limits, NOW).grants == ("new",)
    assert runner.run(granted()) == (admitted and not someone_waits)


@settings(max_examples=60, deadline=None)
@given(holder_priority=st.integers(1, 5), waiters=waiter_lists)
def test_a_run_is_asked_to_yield_exactly_when_may_yield_says_so_for_a_waiter(
    stored: tuple[asyncio.Runner, Database], holder_priority: int, waiters: list[Waiter]
) -> None:
    runner, db = stored

    async def asked() -> bool:
        await store_queue(db, [Held("researcher", ME, True)], waiters, holder_priority)
        async with db.write() as conn:
            return await urgent_waits(
                conn, "held0", priority_at_most=URGENT, yields_from=PREEMPTIBLE_FROM
            )

    kinds = [("preempted" if w.kind is None and w.paused else w.kind) for w in waiters]
    expected = any(
        may_yield(holder_priority, w.priority, kind) for w, kind in zip(waiters, kinds, strict=True)
    )
    assert runner.run(asked()) == expected
