"""Benchmark: the orchestration overhead per step (not a test).

Measures one reconcile – "outcome recorded -> next dispatch recorded", one transaction
with the outbox rows – on a SQLite file database (WAL, the settings of storage/db.py):
- a 200-step chain and a 50-layer diamond DAG (sequential mode, one step in flight);
- the per-event cost with 10, 1,000 and 10,000 other live plans in the database.
Prints medians in microseconds per step, their ratios, and the database round trips per
step (statements + commit). The outbox is delivered through a recording port after each
step, outside the timed section (its cost is printed separately).

    .venv/bin/python bench/reconcile.py          # full run
    .venv/bin/python bench/reconcile.py --quick  # smaller sizes, a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event, insert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flotilla.agents.planning.decisions import Decision  # noqa: E402
from flotilla.agents.planning.effects import Effect, PostDispatch, RunCommanderStep  # noqa: E402
from flotilla.agents.planning.plan import Plan, Step, StepSucceeded  # noqa: E402
from flotilla.agents.reconciling.outbox import Claimed, OutboxSender  # noqa: E402
from flotilla.agents.reconciling.reconciler import Reconciler  # noqa: E402
from flotilla.storage.conversations import conversations_t, open_conversation  # noqa: E402
from flotilla.storage.db import Database  # noqa: E402
from flotilla.storage.locks import sqlite_engine  # noqa: E402
from flotilla.storage.migrate import upgrade  # noqa: E402
from flotilla.storage.plan_steps import steps_t  # noqa: E402
from flotilla.storage.plans import plans_t  # noqa: E402
from flotilla.storage.workspaces import ensure_workspace  # noqa: E402

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class RecordingPort:
    """The network edge, recorded in memory."""

    def __init__(self) -> None:
        self.performed: list[str] = []

    async def perform(self, effect: Effect) -> None:
        self.performed.append(effect.key)

    async def already_performed(self, effect: Effect) -> bool:
        return effect.key in self.performed

    async def __call__(self, claimed: Claimed) -> bool:
        """The outbox's performer (redeliveries checked first, as the executor does)."""
        if claimed.delivery > 1 and await self.already_performed(claimed.effect):
            return False
        await self.perform(claimed.effect)
        return False


class RoundTrips:
    """Counts statements (and commits) sent to the database, and thread hops.

    Statements are counted on both engines of the database: the async one (aiosqlite,
    where each statement is a hop to the driver's thread) through SQLAlchemy's events, and
    the synchronous one that the reconciler's transactions run on (one hop to a worker
    thread per transaction) through SQLite's own trace callback, which also sees the hot
    statements run on the DBAPI cursor (`storage/prepared.py`; there each row of an
    `executemany` counts, as SQLite runs it).
    """

    def __init__(self, db: Database) -> None:
        self.count = 0
        self._traced: set[int] = set()
        event.listen(db.engine.sync_engine, "before_cursor_execute", self._bump)
        for engine in (db.engine.sync_engine, sqlite_engine(db)):
            event.listen(engine, "commit", self._bump)
        event.listen(sqlite_engine(db), "begin", self._trace)

    def _trace(self, conn: Any) -> None:
        """Trace the connection from its first transaction on (its BEGIN counted here)."""
        dbapi = conn.connection.driver_connection
        if id(dbapi) in self._traced:
            return
        self._traced.add(id(dbapi))
        self.count += 1

        def traced(sql: str) -> None:
            if not sql.lstrip()[:8].upper().startswith(("COMMIT", "ROLLBACK", "PRAGMA")):
                self.count += 1

        dbapi.set_trace_callback(traced)

    def _bump(self, *_: Any) -> None:
        self.count += 1


def chain(n: int) -> list[Step]:
    return [
        Step(index=i, title=f"s{i}", assignee="researcher", wait_for=(i - 1,) if i > 1 else ())
        for i in range(1, n + 1)
    ]


def diamond(layers: int) -> list[Step]:
    """Layer k: top -> (left, right) -> the next layer's top; 3 * layers + 1 steps."""
    steps = [Step(index=1, title="top", assignee="researcher")]
    for _ in range(layers):
        top = len(steps)
        for title, wait in (("left", (top,)), ("right", (top,)), ("join", (top + 1, top + 2))):
            steps.append(
                Step(index=len(steps) + 1, title=title, assignee="researcher", wait_for=wait)
            )
    return steps


async def conversation(db: Database, thread: str) -> int:
    async with db.write() as conn:
        found = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts=thread,
            requested_by="U1",
            request_text="bench",
            now=NOW,
        )
    return found.id


async def add_live_plans(db: Database, count: int, first: int) -> None:
    """`count` other running plans (5-step chains, step 1 in progress), in bulk."""
    async with db.write() as conn:
        await ensure_workspace(conn, "T1", NOW)
        for start in range(0, count, 1000):
            batch = range(first + start, first + min(start + 1000, count))
            await conn.execute(
                insert(conversations_t),
                [
                    {"team_id": "T1", "channel_id": "C2", "thread_ts": f"{i}.0", "created_at": NOW}
                    for i in batch
                ],
            )
            ids = await conn.execute(
                conversations_t.select()
                .with_only_columns(conversations_t.c.id)
                .where(conversations_t.c.channel_id == "C2")
                .where(conversations_t.c.thread_ts.in_([f"{i}.0" for i in batch]))
            )
            conv_ids = list(ids.scalars())
            result = await conn.execute(
                insert(plans_t).returning(plans_t.c.id),
                [
                    {"conversation_id": c, "version": 1, "created_at": NOW, "updated_at": NOW}
                    for c in conv_ids
                ],
            )
            plan_ids = list(result.scalars())
            await conn.execute(
                insert(steps_t),
                [
                    {
                        "plan_id": p,
                        "index": i,
                        "title": f"s{i}",
                        "assignee": "researcher",
                        "wait_for": [i - 1] if i > 1 else [],
                        "status": "in_progress" if i == 1 else "pending",
                        "attempts": 1 if i == 1 else 0,
                    }
                    for p in plan_ids
                    for i in range(1, 6)
                ],
            )


InFlight = tuple[tuple[int, int], ...]
"""Steps in flight as (index, attempt)."""


def dispatched(decision: Decision) -> InFlight:
    """The steps `decision` dispatched: what an executor is handed by its outbox rows."""
    return tuple(
        (effect.step, effect.attempt)
        for effect in decision.effects
        if isinstance(effect, PostDispatch | RunCommanderStep)
    )


async def report_in_flight(
    reconciler: Reconciler, cid: int, plan: Plan, tag: str, running: InFlight | None = None
) -> Decision:
    """Every in-flight step of `plan` reported succeeded, in one reconcile; its decision.

    `running`: the steps in flight as the caller knows them (an executor knows the runs it
    was handed: `dispatched` of the decisions before); None: found by scanning `plan`."""
    if running is None:
        running = tuple((s.index, s.attempts) for s in plan.steps if s.status == "in_progress")
    outcomes = [StepSucceeded(index=i, attempt=n, summary="ok") for i, n in running]
    result = await reconciler.reconcile(cid, event_key=f"{tag}:{running[0][0]}", outcomes=outcomes)
    assert result is not None
    return result


async def run_plan(
    db: Database, steps: list[Step], thread: str, trips: RoundTrips
) -> tuple[list[float], float, float]:
    """Drive a plan to its end; per-step reconcile times (s), round trips and delivery/step."""
    reconciler = Reconciler(db, clock=lambda: NOW)
    sender = OutboxSender(db, RecordingPort(), clock=lambda: NOW)
    cid = await conversation(db, thread)
    decision = await reconciler.start_steps(cid, steps)
    await sender.drain()
    plan = decision.plan
    times: list[float] = []
    trips_used = 0
    delivery = 0.0
    while plan.status == "running":
        running = [s for s in plan.steps if s.status == "in_progress"]
        outcomes = [StepSucceeded(index=s.index, attempt=s.attempts, summary="ok") for s in running]
        before = trips.count
        t0 = time.perf_counter()
        result = await reconciler.reconcile(
            cid, event_key=f"{thread}:{running[0].index}", outcomes=outcomes
        )
        times.append(time.perf_counter() - t0)
        trips_used += trips.count - before
        assert result is not None
        plan = result.plan
        t1 = time.perf_counter()
        await sender.drain()
        delivery += time.perf_counter() - t1
    return times, trips_used / len(times), delivery / len(times)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:8.0f} µs"


async def main(quick: bool) -> None:
    sizes = (60, 15, (10, 100, 1000)) if quick else (200, 50, (10, 1000, 10000))
    chain_n, layers, crowds = sizes
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}")
        await upgrade(db)
        trips = RoundTrips(db)
        print(f"SQLite file database, WAL, synchronous=NORMAL; {'quick' if quick else 'full'} run")

        chain_times, chain_trips, chain_delivery = await run_plan(db, chain(chain_n), "c", trips)
        d_steps = diamond(layers)
        d_times, d_trips, d_delivery = await run_plan(db, d_steps, "d", trips)
        chain_med = statistics.median(chain_times)
        d_med = statistics.median(d_times)
        print(
            f"{chain_n}-step chain:     median {us(chain_med)} per step, "
            f"{chain_trips:.1f} statements per step, outbox delivery {us(chain_delivery)}"
        )
        print(
            f"{layers}-layer diamond ({len(d_steps)} steps): median {us(d_med)} per step, "
            f"{d_trips:.1f} statements per step, outbox delivery {us(d_delivery)}"
        )
        print(f"ratio diamond / chain: {d_med / chain_med:.2f}")

        live = 0
        medians: list[float] = []
        for crowd in crowds:
            await add_live_plans(db, crowd - live, first=live)
            live = crowd
            times, _, _ = await run_plan(db, chain(20), f"crowd{crowd}", trips)
            medians.append(statistics.median(times))
            print(f"20-step chain, {crowd:>6} other live plans: median {us(medians[-1])} per event")
        base = medians[0]
        ratios = ", ".join(f"{c}: {m / base:.2f}" for c, m in zip(crowds, medians, strict=True))
        print(f"ratio to {crowds[0]} other plans: {ratios}")
        await db.dispose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, a few seconds")
    asyncio.run(main(parser.parse_args().quick))
