"""The scheduler's cost when idle (`bench/scheduler.py --only idle`): one process, one
workspace, no contention, one run at a time through the executor's real jobs
(`agents/running/jobs.py`), beside the reconcile of one step (`bench/reconcile.py`).

Two ways through the same `JobRunner` on the same SQLite file, with this process's
admission loop running (any pass a run wakes is counted):
- unscheduled: the job claims a plain run lease and lets it go (what every run cost before
  the scheduler, and what a plan's final answer costs today);
- scheduled: the step's request for a slot as the executor builds it (`slot_request`: the
  settings, quota keys and estimate remembered for a poll interval), claimed in the job's
  claim transaction (`claim_slot`: granted at once while nobody waits), ended in its settle.
The difference per run is what the scheduler adds; round trips as bench/reconcile.py counts
them (statements, BEGIN included, and commits).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from bench.reconcile import RoundTrips, chain, run_plan
from bench.scheduler_harness import Counted
from flotilla.agents.planning.effects import PostDispatch
from flotilla.agents.running.attempt import Attempt
from flotilla.agents.running.jobs import JobRunner
from flotilla.agents.running.run_context import Context, ExecutorOptions
from flotilla.agents.running.slot_requests import slot_request
from flotilla.agents.scheduling.admission import AdmissionLoop
from flotilla.storage.conversations import open_conversation
from flotilla.storage.db import Database
from flotilla.storage.migrate import upgrade
from flotilla.storage.records import ConversationRecord, RunRequestRecord

OPTIONS = ExecutorOptions(heartbeat=timedelta(hours=1))  # zero-latency runs: no beat


class Observer:
    def jobs_running(self, n: int) -> None:
        return None


class Remembered:
    """The reconciler's memory of the plan it just wrote (the executor's usual case)."""

    def remembered(self, conversation_id: int) -> Any:
        step = SimpleNamespace(assignee="researcher")  # the runs' agent (see per_run_cost)
        return SimpleNamespace(id=1, steps=[step, step, step])


async def _nothing(*_: Any) -> None:
    return None


async def per_run_cost(
    tmp: Path, n: int, scheduled: bool, options: ExecutorOptions = OPTIONS
) -> tuple[float, float, float, int]:
    """Round trips and transactions per run, seconds per run, admission passes."""
    tmp.mkdir(parents=True, exist_ok=True)
    db = Database(f"sqlite+aiosqlite:///{tmp / 'idle.db'}")
    await upgrade(db)
    now = datetime.now(UTC)
    async with db.write() as conn:
        conversation: ConversationRecord = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts="1.0",
            requested_by="U1",
            request_text="idle",
            now=now,
        )
    ctx = cast(
        Context,
        SimpleNamespace(
            db=db,
            clock=lambda: datetime.now(UTC),
            options=options,
            observer=Observer(),
            reconciler=Remembered(),
        ),
    )
    admission = AdmissionLoop(
        db,
        owner="p1",
        team_id=lambda: "T1",
        clock=ctx.clock,
        options=options.scheduler,
        lease=options.lease,
        start=_nothing,
        show_waits=_nothing,
        refuse=_started_nowhere,
    )
    runner = JobRunner(
        ctx, owner="p1", on_slot_freed=lambda *_: admission.wake(), on_queued=admission.wake
    )
    admission.start()
    counted = Counted(db)
    began = time.perf_counter()
    for i in range(1, n + 1):
        effect = PostDispatch(
            key=f"plan:1:step:{i}:attempt:1",
            conversation_id=conversation.id,
            plan_id=1,
            step=i,
            attempt=1,
            agent="researcher",
            title="s",
            text="go",
        )
        slot = None
        if scheduled:
            slot = await slot_request(ctx, admission, effect, conversation)
        runner.hold(effect, effect.key, _zero_latency, slot=slot)
        job = runner.jobs[effect.key]
        assert job.task is not None
        await job.task
    spent = time.perf_counter() - began
    trips, transactions = counted.statements + counted.transactions, counted.transactions
    passes = admission.passes
    await admission.stop()
    await db.dispose()
    return trips / n, transactions / n, spent / n, passes


async def _zero_latency(_attempt: Attempt) -> None:
    return None


async def _started_nowhere(record: RunRequestRecord, reason: str) -> None:
    return None


async def idle(tmp: Path, n: int, rounds: int = 3) -> list[str]:
    """Each way `rounds` times, alternated (the machine's load moves times, not counts)."""
    plain, scheduled = [], []
    for r in range(rounds):
        plain.append(await per_run_cost(tmp / f"plain-{r}", n, scheduled=False))
        scheduled.append(await per_run_cost(tmp / f"scheduled-{r}", n, scheduled=True))
    plain_trips, plain_tx, _, _ = plain[-1]
    trips, tx, _, passes = scheduled[-1]
    plain_s = statistics.median(p[2] for p in plain)
    spent = statistics.median(s[2] for s in scheduled)
    db = Database(f"sqlite+aiosqlite:///{tmp / 'reconcile.db'}")
    await upgrade(db)
    rt = RoundTrips(db)
    times, per_step, _ = await run_plan(db, chain(60), "c", rt)
    await db.dispose()
    reconcile = statistics.median(times)
    extra_trips, extra_tx, extra_s = trips - plain_trips, tx - plain_tx, spent - plain_s
    return [
        f"idle cost ({n} runs one at a time, one process, one workspace): a run's job costs "
        f"{plain_trips:.2f} round trips in {plain_tx:.2f} transactions unscheduled, "
        f"{trips:.2f} in {tx:.2f} scheduled ({passes} admission passes in {n} runs): "
        f"+{extra_trips:.2f} round trips, +{extra_tx:.2f} transactions per run; "
        f"time {plain_s * 1e6:,.0f} → {spent * 1e6:,.0f} µs per run (median of {rounds})",
        f"  reconcile of one step (bench/reconcile.py, 60-step chain): median "
        f"{reconcile * 1e6:,.0f} µs, {per_step:.1f} round trips in 1 transaction",
        f"  scheduler / reconcile: {extra_trips / per_step:+.2f}× the round trips, "
        f"{extra_tx:+.2f}× the transactions, {extra_s / reconcile:+.2f}× the time "
        "(goal ≤ 0.10×)",
    ]


def run(tmp: Path, n: int) -> list[str]:
    return asyncio.run(idle(tmp, n))
