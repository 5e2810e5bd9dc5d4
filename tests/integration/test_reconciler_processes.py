"""Several OS processes on one database: the lock and the outbox across process boundaries."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections import Counter
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text

from flotilla.agents.reconciling.outbox import OutboxSender
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.storage.db import Database
from tests.fakes.clock import FakeClock
from tests.integration.reconcile_support import (
    AGENTS,
    T0,
    RecordingPort,
    chain,
    diamond,
    new_conversation,
    outbox_keys,
    proposal,
)

ROOT = Path(__file__).resolve().parents[2]
WAIT = 120  # seconds: a bound on a hung worker, never a sleep


async def worker(db: Database, *args: str) -> asyncio.subprocess.Process:
    schema = ""
    if not db.is_sqlite:
        async with db.read() as conn:
            schema = str(await conn.scalar(text("SELECT current_schema()")))
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.integration.reconcile_support",
        args[0],
        db.url,
        schema,
        *args[1:],
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
    )


async def expect_line(proc: asyncio.subprocess.Process, line: str) -> None:
    assert proc.stdout is not None
    got = await asyncio.wait_for(proc.stdout.readline(), WAIT)
    assert got.decode().strip() == line


async def kill(proc: asyncio.subprocess.Process) -> None:
    proc.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), WAIT) == -signal.SIGKILL


async def test_two_processes_reconciling_the_same_conversations(
    db: Database, tmp_path: Path
) -> None:
    """Both processes deliver every result (as two replicas would) and reconcile at once."""
    starter = Reconciler(db, clock=FakeClock(T0))
    conversations = []
    shapes = [chain(6), diamond(), proposal({}, *({"wait_for": [1]} for _ in range(4)))]
    for i in range(6):
        cid = await new_conversation(db, f"2.{i}")
        await starter.start_plan(cid, shapes[i % 3], assignees=AGENTS, max_parallel=1 + i % 2)
        conversations.append(cid)
    ids = ",".join(map(str, conversations))
    outs = [tmp_path / "a.txt", tmp_path / "b.txt"]
    procs = [await worker(db, "race", str(out), ids) for out in outs]
    codes = [await asyncio.wait_for(p.wait(), WAIT) for p in procs]
    assert codes == [0, 0]  # a broken lock makes a guarded write fail inside a worker

    committed = [k for out in outs for k in out.read_text().split()]
    keys = await outbox_keys(db, "post_dispatch")
    duplicate_keys = sum(n - 1 for n in Counter(keys).values() if n > 1)
    per_step = Counter(k.rsplit(":attempt:", 1)[0] for k in keys)
    double_dispatches = sum(n - 1 for n in per_step.values() if n > 1)
    across_processes = sum(n - 1 for n in Counter(committed).values() if n > 1)
    assert (duplicate_keys, double_dispatches, across_processes) == (0, 0, 0)
    assert len(keys) == 2 * (6 + 4 + 5)  # every step of the six plans, once
    assert sorted(committed) == sorted(k for k in keys if not k.endswith(":step:1:attempt:1"))
    for cid in conversations:
        plan = await starter.plan(cid)
        assert plan is not None and plan.status == "completed"


async def test_killed_between_commit_and_side_effect_delivers_once_after_restart(
    db: Database, tmp_path: Path
) -> None:
    proc = await worker(db, "commit-then-hang")
    await expect_line(proc, "committed")
    await kill(proc)
    log = tmp_path / "thread.jsonl"
    port = RecordingPort(log)
    sender = OutboxSender(db, port, clock=FakeClock(T0 + timedelta(hours=1)))
    assert await sender.drain() == 2  # the dispatch and the card, decided before the kill
    assert await sender.drain() == 0
    restarted = OutboxSender(db, RecordingPort(log), clock=FakeClock(T0 + timedelta(hours=2)))
    assert await restarted.drain() == 0
    performed = port.keys()
    assert sorted(performed) == sorted(await outbox_keys(db))
    assert Counter(performed).most_common(1)[0][1] == 1


async def test_killed_after_the_side_effect_before_marked_sent_is_not_repeated(
    db: Database, tmp_path: Path
) -> None:
    cid = await new_conversation(db, "3.1")
    await Reconciler(db, clock=FakeClock(T0)).start_plan(cid, chain(2), assignees=AGENTS)
    log = tmp_path / "thread.jsonl"
    proc = await worker(db, "perform-then-hang", str(log))
    await expect_line(proc, "performed")
    await kill(proc)
    (first,) = RecordingPort(log).keys()  # posted, but the row was never marked sent

    port = RecordingPort(log)
    # after the dead sender's lease ran out, its claimed rows are due again
    sender = OutboxSender(db, port, clock=FakeClock(T0 + timedelta(hours=2)))
    assert await sender.drain() == 2
    assert first in port.checked  # asked "already in the thread?" instead of re-posting
    assert [e.key for e in port.performed if e.key == first] == []
    performed = port.keys()
    assert sorted(performed) == sorted(await outbox_keys(db))
    assert Counter(performed).most_common(1)[0][1] == 1
