"""A job's claim of a row delivered a moment ago (a run's lease without a slot; the slot
path is `test_executor_leases.py`): within a heartbeat of the row's delivery claim the run's
lease ends with that claim and the row is not written; later, the row is held to the
lease's end. Either way the row and the lease come free at one instant."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from sqlalchemy import text

from flotilla.agents.planning.effects import PostDispatch
from flotilla.agents.running.attempt import Attempt
from flotilla.agents.running.jobs import JobRunner
from flotilla.agents.running.run_context import Context, ExecutorOptions
from flotilla.storage.db import Database
from flotilla.storage.locks import run_transaction
from flotilla.storage.migrate import upgrade
from flotilla.storage.outbox import enqueue_effects
from flotilla.storage.runs import run_lease_until

NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)
OPTIONS = ExecutorOptions()
KEY = "plan:1:step:1:attempt:1"


class Observer:
    def jobs_running(self, n: int) -> None:
        return None


@pytest.mark.parametrize(
    ("spent", "row_written"),
    [(timedelta(seconds=1), False), (OPTIONS.heartbeat * 2, True)],
    ids=["a-moment-after-delivery", "two-heartbeats-after-delivery"],
)
async def test_a_claim_holds_the_row_only_when_its_delivery_claim_is_not_fresh(
    tmp_path: Path, spent: timedelta, row_written: bool
) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'claims.db'}")
    await upgrade(db)
    row_until = NOW - spent + OPTIONS.lease  # the delivery claimed the row `spent` ago
    row: dict[str, Any] = {
        "idempotency_key": KEY,
        "kind": "post_dispatch",
        "conversation_id": None,
        "payload": {},
        "available_at": row_until,
    }
    await run_transaction(db, lambda conn: enqueue_effects(conn, [row], NOW - spent))
    ctx = cast(
        Context,
        SimpleNamespace(
            db=db, clock=lambda: NOW, options=OPTIONS, observer=Observer(), reconciler=None
        ),
    )
    runner = JobRunner(ctx, owner="p1")
    running, release = asyncio.Event(), asyncio.Event()

    async def work(_attempt: Attempt) -> None:
        running.set()
        await release.wait()

    effect = PostDispatch(
        key=KEY,
        conversation_id=1,
        plan_id=1,
        step=1,
        attempt=1,
        agent="researcher",
        title="s",
        text="go",
    )
    runner.hold(effect, "lease:1", work, row_until=row_until)
    await asyncio.wait_for(running.wait(), 10)
    async with db.read() as conn:
        lease_until = await run_lease_until(conn, "lease:1")
        found = await conn.execute(text("SELECT available_at FROM outbox"))
        due: Any = found.scalar_one()
    expected = NOW + OPTIONS.lease if row_written else row_until
    assert lease_until is not None and lease_until.replace(tzinfo=UTC) == expected
    assert datetime.fromisoformat(str(due)).replace(tzinfo=UTC) == expected  # one instant
    release.set()
    job = runner.jobs.get(KEY)
    if job is not None and job.task is not None:
        await asyncio.gather(job.task, return_exceptions=True)
    await db.dispose()
