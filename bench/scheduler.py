"""The scheduler end to end through the database: fairness, priority latency, resume
fidelity and idle cost of the wired admission loop (`agents/admission.py`), FIFO beside it.

UNFINISHED: on the shared development machine a scenario sometimes stalls (no error, the
event loop idle) and the run does not finish; the cause is not found yet, so no figures
from it are recorded in bench/README.md. `bench/fairness.py` still gives the policy's.

Three admission loops (three "processes", each its own engine) share one SQLite file and
grant run requests (`storage/run_requests.py`) exactly as replicas do; a simulated run holds
its slot for a number of model turns, checks at each turn boundary whether it was asked to
pause (as a job's heartbeat does), and settles its request. Not the Slack layer, not the
model: the scheduling machinery alone, with real rows, leases and passes.

- Fairness: tenant A submits 100 runs, B–E 5 each just after; capacity 4; a zero-latency
  model and one taking a fixed time per turn (3 turns per run). Each tenant's share of
  grants while all are backlogged, Jain's index, the small tenants' p95 wait – fair policy
  and FIFO (the same loop deciding first come, first served) side by side.
- Priority: 4 batch runs of 10 turns fill the 4 slots; an urgent run arrives; how long,
  in model turns, until it starts (it preempts a batch run at its next boundary).
- Resume fidelity: 50 runs of 5 turns with forced preemptions and two "kill -9"s (a
  process stops renewing; its lease expires and another process resumes the run from its
  last stored turn): turns paid against the uninterrupted total.
- Idle cost: one tenant, no contention: the scheduler's time per run (ask, pass, grant,
  settle), to set beside the per-step cost of `bench/reconcile.py`.

Run: `python bench/scheduler.py` (about a minute).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.admission import AdmissionLoop  # noqa: E402
from agents.admission_policy import SchedulerOptions  # noqa: E402
from agents.scheduler import (  # noqa: E402
    BATCH,
    URGENT,
    Admission,
    Limits,
    Running,
    RunRequest,
    Wait,
    admit,
)
from storage.db import Database  # noqa: E402
from storage.migrate import upgrade  # noqa: E402
from storage.records import RunRequestRecord  # noqa: E402
from storage.run_requests import finish_request, renew_request, requeue_request  # noqa: E402
from storage.runs import release_run  # noqa: E402

LEASE = timedelta(seconds=30)


def fifo(
    waiting: Sequence[RunRequest],
    running: Sequence[Running],
    limits: Limits,
    now: datetime,
    served: Mapping[str, float] | None = None,
) -> Admission:
    """First come, first served with the same capacity (today's order, capped)."""
    ordered = sorted(waiting, key=lambda r: (r.enqueued_at, r.key))
    free = max(0, limits.capacity - len(running))
    grants = tuple(r.key for r in ordered[:free])
    waits = {r.key: Wait("capacity", "waiting") for r in ordered[free:]}
    return Admission(grants, waits)


class Clock:
    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset


@dataclass
class Harness:
    """Three admission loops on one database and the simulated runs they start."""

    url: str
    turn: float  # seconds per model turn (0: zero latency)
    decide: object = admit
    capacity: int = 4
    process_capacity: int = 4
    clock: Clock = field(default_factory=Clock)
    loops: list[AdmissionLoop] = field(default_factory=list)
    dbs: list[Database] = field(default_factory=list)
    turns_needed: dict[str, int] = field(default_factory=dict)
    turns_done: Counter[str] = field(default_factory=Counter)  # stored turns (history)
    paid: int = 0  # model turns paid for, re-paid ones included
    enqueued: dict[str, float] = field(default_factory=dict)
    granted: dict[str, float] = field(default_factory=dict)
    grant_log: list[tuple[str, dict[str, int]]] = field(default_factory=list)
    finished: set[str] = field(default_factory=set)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    dead: set[str] = field(default_factory=set)
    resumes: Counter[str] = field(default_factory=Counter)  # grants after the first

    async def start(self, *, run: bool = True) -> None:
        options = SchedulerOptions(
            capacity=self.capacity, process_capacity=self.process_capacity, poll_seconds=1.0
        )
        for i in range(3):
            db = Database(self.url)
            owner = f"p{i}"
            loop = AdmissionLoop(
                db, owner=owner, team_id=lambda: "T", clock=self.clock, options=options,
                lease=LEASE, start=self._starter(db, owner), show_waits=_nothing,
                refuse=_refused, decide=self.decide,  # type: ignore[arg-type]
            )  # fmt: skip
            self.loops.append(loop)
            self.dbs.append(db)
        if run:
            self.run()

    def run(self) -> None:
        """Start the three loops' passes."""
        for loop in self.loops:
            loop.start()

    async def stop(self) -> None:
        for loop in self.loops:
            await loop.stop()
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        for db in self.dbs:
            await db.dispose()

    async def ask(self, key: str, tenant: str, turns: int, priority: int = 3) -> None:
        self.turns_needed[key] = turns
        self.enqueued[key] = time.perf_counter()
        await self.loops[len(self.enqueued) % 3].enqueue(
            run_key=key, effect_key=f"outbox:{key}", effect_kind="post_dispatch", effect={},
            conversation_id=None, team_id="T", channel_id=tenant, agent_name="researcher",
            plan_id=None, step_index=None, attempt=None, priority=priority,
            estimate_tokens=0, tools=[],
        )  # fmt: skip

    def _starter(self, db: Database, owner: str):  # type: ignore[no-untyped-def]
        async def start(record: RunRequestRecord) -> None:
            if record.run_key in self.granted:
                self.resumes[record.run_key] += 1
            self.granted.setdefault(record.run_key, time.perf_counter())
            waiting = Counter(k.split("-")[0] for k in self.enqueued if k not in self.granted)
            self.grant_log.append((record.channel_id, dict(waiting)))
            task = asyncio.create_task(self._run(db, owner, record))
            task.add_done_callback(_report_failure)
            self.tasks[record.run_key] = task

        return start

    async def _run(self, db: Database, owner: str, record: RunRequestRecord) -> None:
        key = record.run_key
        while self.turns_done[key] < self.turns_needed[key]:
            await asyncio.sleep(self.turn)
            self.paid += 1
            if owner in self.dead:
                return  # killed mid-turn: this turn was paid, never stored
            self.turns_done[key] += 1  # the history is stored after every turn
            if self.turns_done[key] == self.turns_needed[key]:
                break
            async with db.write() as conn:  # the turn boundary: asked to pause?
                pause = await renew_request(conn, key, owner, self.clock() + LEASE)
                if pause:
                    await requeue_request(conn, key, owner, preempted=True)
                    await release_run(conn, key, owner)
            if pause:
                self._wake_all()
                return
        async with db.write() as conn:
            await finish_request(conn, key, self.clock())
            await release_run(conn, key, owner)
        self.finished.add(key)
        self.done.set()
        self._wake_all()

    def _wake_all(self) -> None:
        for loop in self.loops:
            loop.wake()

    async def until_done(self, keys: list[str]) -> None:
        while True:
            self.done.clear()
            if all(k in self.finished for k in keys):
                return
            await self.done.wait()


def _report_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        print(f"a simulated run failed: {task.exception()!r}", file=sys.stderr)


async def _nothing(conversation_id: int, plan_id: int) -> None:
    return None


async def _refused(record: RunRequestRecord, reason: str) -> None:
    return None


async def fresh(tmp: Path, name: str) -> str:
    url = f"sqlite+aiosqlite:///{tmp / name}.db"
    db = Database(url)
    await upgrade(db)
    await db.dispose()
    return url


def jain(counts: list[int]) -> float:
    total = sum(c * c for c in counts)
    return sum(counts) ** 2 / (len(counts) * total) if total else 0.0


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


async def fairness(tmp: Path, policy: str, turn: float, turns: int) -> str:
    decide = admit if policy == "fair" else fifo
    h = Harness(await fresh(tmp, f"fair-{policy}-{turn}"), turn, decide)
    await h.start(run=False)  # everything asks first: A's 100, then B–E's 5 each
    keys = [f"A-{i}" for i in range(100)]
    for key in keys:
        await h.ask(key, "A", turns)
    for tenant in "BCDE":
        for i in range(5):
            keys.append(f"{tenant}-{i}")
            await h.ask(keys[-1], tenant, turns)
    for key in keys:
        h.enqueued[key] = time.perf_counter()  # waits count from when the passes begin
    h.run()
    await h.until_done(keys)
    await h.stop()
    shares: Counter[str] = Counter()
    for tenant, waiting in h.grant_log:
        if all(waiting.get(t, 0) > 0 for t in "ABCDE"):
            shares[tenant] += 1
    counts = [shares[t] for t in "ABCDE"]
    small = [h.granted[k] - h.enqueued[k] for k in keys if k[0] in "BCDE"]
    return (
        f"{policy:5} {'zero latency' if turn == 0 else f'{turns}×{turn * 1000:g} ms turns':16}"
        f" {' '.join(f'{c:4}' for c in counts):26} {jain(counts):5.2f}"
        f"  {p95(small) * 1000:8.0f} ms"
    )


async def priority(tmp: Path) -> str:
    turn = 0.05
    h = Harness(await fresh(tmp, "priority"), turn)
    await h.start()
    batch = [f"B-{i}" for i in range(4)]
    for key in batch:
        await h.ask(key, "batch", 10, priority=BATCH)
    while len(h.granted) < 4:
        await asyncio.sleep(0.005)
    await asyncio.sleep(turn * 2.5)  # the slots are busy mid-run
    await h.ask("U-0", "urgent", 1, priority=URGENT)
    await h.until_done([*batch, "U-0"])
    await h.stop()
    waited = (h.granted["U-0"] - h.enqueued["U-0"]) / turn
    return (
        f"priority: an urgent run started {waited:.2f} model turns after it arrived "
        "(4 batch runs of 10 turns held the 4 slots)"
    )


async def fidelity(tmp: Path) -> str:
    turn = 0.01
    h = Harness(await fresh(tmp, "fidelity"), turn, process_capacity=2)
    await h.start()
    keys = [f"P-{i}" for i in range(50)]
    for i, key in enumerate(keys):
        await h.ask(key, f"c{i % 5}", 5, priority=BATCH if i % 2 else 3)
    urgent = []
    for round_ in range(5):  # forced preemptions: urgent work arrives while batch runs
        await asyncio.sleep(turn * 6)
        urgent.append(f"U-{round_}")
        await h.ask(urgent[-1], "u", 1, priority=URGENT)
    await asyncio.sleep(turn * 3)
    for victim in ("p1",):  # kill -9: p1 stops mid-turn, renews nothing, releases nothing
        h.dead.add(victim)
        await h.loops[1].stop()
    h.clock.offset += LEASE + timedelta(seconds=1)  # its lease expires
    for loop in h.loops:
        loop.wake()
    await h.until_done(keys + urgent)
    await h.stop()
    needed = sum(h.turns_needed.values())
    resumed = sum(1 for k in keys if h.resumes[k])
    return (
        f"resume fidelity: {resumed} runs paused or taken over and resumed; all {len(keys)} "
        f"finished; turns paid {h.paid} for {needed} needed ({h.paid / needed:.3f}×)"
    )


async def idle(tmp: Path, n: int = 200) -> str:
    """One run at a time, one loop asking: the scheduler's own cost per run."""
    h = Harness(await fresh(tmp, "idle"), 0.0, capacity=16, process_capacity=8)
    await h.start()
    times = []
    for i in range(n):
        began = time.perf_counter()
        await h.ask(f"I-{i}", "c", 1)
        await h.until_done([f"I-{i}"])
        times.append(time.perf_counter() - began)
    await h.stop()
    return (
        f"idle cost: median {statistics.median(times) * 1e6:,.0f} µs per run "
        "(ask, pass, grant, settle; SQLite, one tenant, no contention)"
    )


def main() -> None:
    """Each scenario in its own event loop (nothing of one run lingers in the next)."""
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        print("SQLite file, three admission loops on one database, capacity 4")
        print("policy model            shares while backlogged A–E  Jain  small p95 wait")
        for turn, turns in ((0.0, 1), (0.01, 3)):
            for policy in ("fifo", "fair"):
                print(asyncio.run(fairness(tmp, policy, turn, turns)), flush=True)
        print(asyncio.run(priority(tmp)), flush=True)
        print(asyncio.run(fidelity(tmp)), flush=True)
        print(asyncio.run(idle(tmp)), flush=True)


if __name__ == "__main__":
    main()
