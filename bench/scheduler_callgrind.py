"""The scheduler's idle cost as instructions executed, counted by valgrind's callgrind: a
count that does not move with the machine's load (wall time moves ±50 % on a shared
machine; see bench/README.md, "Idle cost and urgent start").

Each workload runs in its own Python process under `valgrind --tool=callgrind`, twice: with
`warm` units of work and with `warm + n`; the difference of the two processes' totals ÷ n
is the instructions of one unit, with the interpreter's start, the imports, the database's
setup and the first units' one-time costs (statements compiled, caches filled) cancelled.

- a run's job, unscheduled and scheduled: `bench/scheduler_idle.py`'s zero-latency runs
  one at a time through the executor's real `JobRunner`, one process, one workspace, its
  admission loop running (polling once an hour here, so wall time adds no passes);
- a reconcile of one step: `bench/reconcile.py`'s chain, "outcome recorded → next
  dispatch recorded" (the reconcile alone, as bench/reconcile.py times it; the outbox is
  not delivered between steps).

Run: `.venv/bin/python bench/scheduler_callgrind.py` (a few minutes: valgrind runs Python
~50× slower), `--runs 50 --warm 10` by default.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import callgrind  # noqa: E402
from bench.reconcile import NOW, chain, conversation, report_in_flight  # noqa: E402
from bench.scheduler_idle import OPTIONS, per_run_cost  # noqa: E402
from flotilla.agents.reconciling.reconciler import Reconciler  # noqa: E402
from flotilla.storage.db import Database  # noqa: E402
from flotilla.storage.migrate import upgrade  # noqa: E402

WORKLOADS = ("unscheduled", "scheduled", "reconcile")
# no admission poll while a run goes on: passes would follow valgrind's slow wall clock
QUIET = replace(OPTIONS, scheduler=replace(OPTIONS.scheduler, poll_seconds=3600.0))


async def reconcile_steps(tmp: Path, steps: int, length: int) -> None:
    """A `length`-step chain started, then `steps` of its steps reconciled one at a time."""
    db = Database(f"sqlite+aiosqlite:///{tmp / 'reconcile.db'}")
    await upgrade(db)
    reconciler = Reconciler(db, clock=lambda: NOW)
    cid = await conversation(db, "c")
    plan = (await reconciler.start_steps(cid, chain(length))).plan
    for _ in range(steps):
        plan = (await report_in_flight(reconciler, cid, plan, "c")).plan
    await db.dispose()


async def child(workload: str, units: int, length: int, tmp: Path) -> None:
    """One measured process: `units` runs or steps of `workload`."""
    if workload == "reconcile":
        await reconcile_steps(tmp, units, length)
    else:
        await per_run_cost(tmp / workload, units, workload == "scheduled", QUIET)


def instructions(workload: str, units: int, length: int, tmp: Path) -> int:
    """Instructions one process executed, under callgrind, doing `units` of `workload`."""
    args = ["--child", workload, str(units), str(length)]
    work = tmp / f"{workload}-{units}"
    return callgrind.instructions(__file__, [*args, str(work)], work)


def per_unit(runs: int, warm: int) -> dict[str, float]:
    """Instructions per run or step of each workload (two processes each, two at a time)."""
    length = warm + runs + 1
    jobs = [(w, units) for w in WORKLOADS for units in (warm, warm + runs)]
    with tempfile.TemporaryDirectory() as tmp_dir, ThreadPoolExecutor(2) as pool:
        tmp = Path(tmp_dir)
        found = pool.map(lambda job: instructions(job[0], job[1], length, tmp), jobs)
        counts = dict(zip(jobs, found, strict=True))
    return {w: (counts[(w, warm + runs)] - counts[(w, warm)]) / runs for w in WORKLOADS}


def report(units: dict[str, float], runs: int, warm: int) -> list[str]:
    plain, scheduled, step = units["unscheduled"], units["scheduled"], units["reconcile"]
    extra = scheduled - plain
    return [
        f"instructions (callgrind; {runs} runs or steps after {warm}, each count the "
        "difference of two processes):",
        f"  a run's job, unscheduled: {plain:,.0f} per run",
        f"  a run's job, scheduled:   {scheduled:,.0f} per run",
        f"  the scheduler adds:       {extra:+,.0f} per run",
        f"  a reconcile of one step (bench/reconcile.py's chain): {step:,.0f} per step",
        f"  scheduler / reconcile step: {extra / step:+.3f}× (goal ≤ 0.10×)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=50, help="measured runs or steps")
    parser.add_argument("--warm", type=int, default=10, help="runs or steps in both processes")
    parser.add_argument("--child", nargs=4, metavar=("WORKLOAD", "UNITS", "LENGTH", "DIR"))
    args = parser.parse_args()
    if args.child:
        workload, units, length, work = args.child
        asyncio.run(child(workload, int(units), int(length), Path(work)))
        return
    for line in report(per_unit(args.runs, args.warm), args.runs, args.warm):
        print(line, flush=True)


if __name__ == "__main__":
    main()
