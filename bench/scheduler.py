"""The scheduler through the database: fairness, priority latency, resume fidelity and idle
cost of the wired admission loop (`agents/scheduling/admission.py`), plain FIFO through the same
loop
beside it.

Three admission loops (three "processes", each its own engine) share one SQLite file and
grant run requests (`storage/run_requests.py`) exactly as replicas do; a simulated run holds
its slot for a number of model turns, renews its lease and checks at each turn boundary
whether urgent work waits for its slot (then the first run to get there hands it over and
pauses, as a job's stored turn does), and settles its request. Not the
Slack layer, not the model, not the executor's jobs: the scheduling machinery alone, with
real rows, leases and passes (`tests/e2e/slice/test_scheduler.py` covers the executor's
side of a pause through the Bolt app).

- Fairness: tenant A submits 100 runs, B–E 5 each just after; capacity 4; a zero-latency
  model and one taking a fixed time per turn (3 turns per run). Each tenant's share of
  grants while all are backlogged, Jain's index, the small tenants' p95 wait – fair policy
  and FIFO (the same loop deciding first come, first served) side by side; then weighted
  (A's channel weight 2): shares against the weights.
- Priority: 4 batch runs of 10 turns fill the 4 slots; an urgent run arrives; how long,
  in model turns, until it starts (the first batch run to reach a boundary yields).
- Resume fidelity: 50 runs of 5 turns with forced preemptions (urgent work arriving) and
  two "kill -9"s at random turn boundaries (a process stops mid-turn and renews nothing;
  its short lease expires and another process resumes each run from its last stored
  turn): every run's stored turns against an uninterrupted run's, turns paid against the
  uninterrupted total.
- Idle cost (`bench/scheduler_idle.py`): one process, one workspace, no contention, the
  executor's real jobs with and without a slot request: the round trips, transactions and
  time the scheduler adds per run, beside `bench/reconcile.py`'s per-step reconcile
  (`bench/scheduler_callgrind.py` counts the same in instructions, steady under load).

An earlier version "sometimes stalled with an idle event loop": that was the product's
admission loop swallowing its own cancellation on Python 3.11 (see
`tests/integration/test_admission_stop.py`), fixed.

Run: `python bench/scheduler.py` (a few minutes), `--quick` (smaller sizes, about a minute),
`--only fairness|priority|fidelity|idle` (one scenario).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import scheduler_idle  # noqa: E402
from bench.scheduler_harness import Harness, fifo, fresh  # noqa: E402
from flotilla.agents.scheduling.scheduler import BATCH, URGENT, admit  # noqa: E402

TENANTS = "ABCDE"


def jain(counts: Sequence[float]) -> float:
    total = sum(c * c for c in counts)
    return sum(counts) ** 2 / (len(counts) * total) if total else 0.0


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


@dataclass(frozen=True)
class Sizes:
    big: int = 100  # tenant A's runs
    small: int = 5  # each of B–E's
    weighted_small: int = 25  # each of B–E's when weighted: a backlog long enough to measure
    fidelity: int = 50
    idle: int = 200


async def fairness(
    tmp: Path, sizes: Sizes, policy: str, turn: float, turns: int, weights: dict[str, float]
) -> str:
    small_runs = sizes.weighted_small if weights else sizes.small
    decide = admit if policy == "fair" else fifo
    name = f"fair-{policy}-{turn}-{len(weights)}"
    h = Harness(await fresh(tmp, name), turn, decide, weights=weights)
    await h.start(run=False)  # everything asks first: A's runs, then B–E's
    keys = [f"A-{i}" for i in range(sizes.big)]
    for key in keys:
        await h.ask(key, "A", turns)
    for tenant in TENANTS[1:]:
        for i in range(small_runs):
            keys.append(f"{tenant}-{i}")
            await h.ask(keys[-1], tenant, turns)
    for key in keys:
        h.enqueued[key] = time.perf_counter()  # waits count from when the passes begin
    h.run()
    await h.until_done(keys)
    await h.stop()
    shares: Counter[str] = Counter()
    for tenant, waiting in h.grant_log:
        if all(waiting.get(t, 0) > 0 for t in TENANTS):
            shares[tenant] += 1
    counts = [shares[t] for t in TENANTS]
    w = [weights.get(t, 1.0) for t in TENANTS]
    small = [h.granted[k] - h.enqueued[k] for k in keys if k[0] in TENANTS[1:]]
    model = "zero latency" if turn == 0 else f"{turns}×{turn * 1000:g} ms turns"
    label = f"{policy} w{small_runs}" if weights else policy
    fairness_index = jain([c / x for c, x in zip(counts, w, strict=True)])
    line = (
        f"{label:8} {model:16} {' '.join(f'{c:4}' for c in counts):26} {fairness_index:5.2f}"
        f"  {p95(small) * 1000:8.0f} ms"
    )
    if weights and sum(counts):
        total, wsum = sum(counts), sum(w)
        off = max(abs(c / total - x / wsum) / (x / wsum) for c, x in zip(counts, w, strict=True))
        line += f"  shares vs weights: at most {off * 100:.0f} % off"
    return line


async def urgent_wait(tmp: Path, trial: int, turn: float) -> tuple[float, float, int, float]:
    """Model turns from an urgent run's arrival to its start, the 4 slots full of batch;
    seconds from the paused batch run's turn boundary to that start; batch boundaries
    reached between its arrival and that boundary (0: the first one after it yielded);
    the batch runs' turns as measured, boundary to boundary (the model's time plus storing
    the turn), in seconds (median)."""
    h = Harness(await fresh(tmp, f"priority-{trial}"), turn)
    await h.start()
    batch = [f"B-{i}" for i in range(4)]
    for key in batch:
        await h.ask(key, "batch", 10, priority=BATCH)
    while len(h.granted) < 4:
        await asyncio.sleep(0.005)
    await asyncio.sleep(turn * (2.1 + 0.2 * trial))  # the slots are busy mid-run, mid-turn
    await h.ask("U-0", "urgent", 1, priority=URGENT)
    await h.until_done([*batch, "U-0"])
    await h.stop()
    started, arrived = h.granted["U-0"], h.enqueued["U-0"]
    paused = min(h.paused_at, default=started)
    missed = sum(1 for _, at in h.boundary_at if arrived < at < paused)
    periods = [
        b - a
        for key in batch
        for a, b in itertools.pairwise(at for k, at in h.boundary_at if k == key)
    ]
    return (started - arrived) / turn, started - paused, missed, statistics.median(periods)


def priority(tmp: Path, trials: int) -> str:
    turn = 0.05
    trials_run = [asyncio.run(urgent_wait(tmp, trial, turn)) for trial in range(trials)]
    waits = sorted(w for w, _, _, _ in trials_run)
    after = statistics.median(a for _, a, _, _ in trials_run)
    each = ", ".join(f"{w:.2f} ({m})" for w, _, m, _ in trials_run)
    measured = sorted(w * turn / p for w, _, _, p in trials_run)
    period = statistics.median(p for _, _, _, p in trials_run)
    return (
        f"priority: an urgent run started {statistics.median(waits):.2f} model turns after it "
        f"arrived (median of {trials}; {waits[0]:.2f}–{waits[-1]:.2f}; goal ≤ 1; 4 batch runs "
        f"of 10 turns of {turn * 1000:g} ms held the 4 slots), {after * 1000:.0f} ms (median) "
        f"after the paused batch run reached its turn boundary\n  trials: {each} – turns "
        "(batch boundaries reached after it arrived, before the one that yielded)\n"
        f"  in the batch runs' turns as measured (boundary to boundary, median "
        f"{period * 1000:.0f} ms): {statistics.median(measured):.2f} median, "
        f"{measured[0]:.2f}–{measured[-1]:.2f}"
    )


async def fidelity(tmp: Path, sizes: Sizes, seed: int = 11) -> str:
    """Preemptions and two kills at random turn boundaries; each dead process is replaced
    by a fresh one (a restarted replica), its runs resumed elsewhere once its lease ends."""
    rng = random.Random(seed)
    turn = 0.01
    lease = timedelta(seconds=0.5)  # renewed at every turn boundary; a kill frees it soon
    h = Harness(
        await fresh(tmp, "fidelity"), turn, process_capacity=2, lease=lease, poll_seconds=0.2
    )
    await h.start()
    keys = [f"P-{i}" for i in range(sizes.fidelity)]
    for i, key in enumerate(keys):
        await h.ask(key, f"c{i % 5}", 5, priority=BATCH if i % 2 else 3)
    urgent: list[str] = []
    kills = sorted(rng.sample(range(20, 5 * sizes.fidelity // 2), 2))
    killed = 0
    while not all(k in h.finished for k in keys):
        if h.boundaries >= kills[min(killed, 1)] and killed < 2:
            victim = next(loop for loop in h.loops if loop.owner not in h.dead)
            h.dead.add(victim.owner)  # kill -9 at a turn boundary: nothing renewed or released
            await victim.stop()
            h.add_process(f"p{len(h.loops)}").start()  # its replacement
            killed += 1
        if len(urgent) < 5 and rng.random() < 0.1:  # forced preemptions: urgent work
            urgent.append(f"U-{len(urgent)}")
            await h.ask(urgent[-1], "u", 1, priority=URGENT)
        await asyncio.sleep(turn)
    await h.until_done(keys + urgent)
    await h.stop()
    needed = sum(h.turns_needed.values())
    same = sum(1 for k in h.turns_needed if h.stored[k] == list(range(h.turns_needed[k])))
    resumed = sum(1 for k in keys if h.resumes[k])
    return (
        f"resume fidelity: {len(urgent)} urgent runs, {killed} processes killed at turn "
        f"boundaries; {resumed} runs paused or taken over and resumed; "
        f"{same}/{len(h.turns_needed)} runs stored the same turns as uninterrupted; "
        f"turns paid {h.paid} for {needed} needed ({h.paid / needed:.3f}×, goal ≤ 1.05×)"
    )


def main() -> None:
    """Each scenario in its own event loop (nothing of one run lingers in the next)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, about a minute")
    parser.add_argument(
        "--only", choices=("fairness", "priority", "fidelity", "idle"), help="one scenario"
    )
    args = parser.parse_args()
    quick, only = args.quick, args.only
    sizes = Sizes(big=40, small=2, weighted_small=10, fidelity=20, idle=50) if quick else Sizes()
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if only in (None, "fairness"):
            print(
                f"SQLite file, three admission loops on one database, capacity 4; "
                f"A {sizes.big} runs, B–E {sizes.small} each{' (quick)' if quick else ''}"
            )
            print("policy   model            shares while backlogged A–E  Jain  small p95 wait")
            print(
                f"(w{sizes.weighted_small}: A's channel weight 2, B–E {sizes.weighted_small} "
                "runs each; Jain of share / weight)"
            )
            for turn, turns in ((0.0, 1), (0.01, 3)):
                for policy in ("fifo", "fair"):
                    print(asyncio.run(fairness(tmp, sizes, policy, turn, turns, {})), flush=True)
                weighted = {"A": 2.0}
                line = asyncio.run(fairness(tmp, sizes, "fair", turn, turns, weighted))
                print(line, flush=True)
        if only in (None, "priority"):
            print(priority(tmp, 3 if quick else 7), flush=True)
        if only in (None, "fidelity"):
            print(asyncio.run(fidelity(tmp, sizes)), flush=True)
        if only in (None, "idle"):
            for line in scheduler_idle.run(tmp, sizes.idle):
                print(line, flush=True)


if __name__ == "__main__":
    main()
