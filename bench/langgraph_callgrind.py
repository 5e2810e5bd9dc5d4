"""Flotilla's per-step cost beside LangGraph's as instructions executed, counted by valgrind's
callgrind: a count that does not move with the machine's load (`bench/langgraph_compare.py`'s
wall and CPU times move ±50 % on a shared machine).

The same workloads as `bench/langgraph_compare.py` – Flotilla's reconcile *and* the delivery
of its outbox rows, wired as the executor wires them; LangGraph's `invoke(durability="sync")`
with its SQLite checkpointer – on a chain and a diamond, at `synchronous` NORMAL and FULL.
Each runs in its own Python process under `valgrind --tool=callgrind` at two sizes (a
`--small` and a `--big` graph); the difference of the two processes' totals ÷ the difference
of their steps is the instructions of one step, with the interpreter's start, the imports,
the database's setup and the graph's compile cancelled (`bench/callgrind.py`); each run
collects the set-up's garbage before its first step (`bench/langgraph_compare.py`), so
a full collection it would trigger does not land in one size's count and not the other's.

Run: `.venv/bin/python bench/langgraph_callgrind.py` (some minutes: valgrind runs Python
~50× slower; 16 processes, two at a time), `--small 20 --big 120` steps by default
(a diamond of layers with about as many steps).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import callgrind  # noqa: E402
from bench.langgraph_compare import Sync, flotilla_per_step, langgraph_per_step  # noqa: E402
from bench.reconcile import chain, diamond  # noqa: E402
from flotilla.agents.planning.plan import Step  # noqa: E402

SYSTEMS = ("Flotilla", "LangGraph")
MODES: tuple[Sync, ...] = ("NORMAL", "FULL")
SHAPES = ("chain", "diamond")


def graph(shape: str, steps: int) -> list[Step]:
    """A chain of `steps`, or the diamond of about as many (3 steps a layer, plus the top)."""
    return chain(steps) if shape == "chain" else diamond(max(1, (steps - 1) // 3))


def child(system: str, mode: Sync, shape: str, steps: int, work: Path) -> None:
    """One measured process: one run of `shape` at `steps` by `system`."""
    plan = graph(shape, steps)
    if system == "Flotilla":
        asyncio.run(flotilla_per_step(work, plan, mode, "bench"))
    else:
        langgraph_per_step(work, plan, mode, "bench")


Job = tuple[str, str, str, int]


def measure(job: Job, tmp: Path) -> int:
    system, mode, shape, steps = job
    work = tmp / "-".join(map(str, job))
    return callgrind.instructions(__file__, ["--child", *map(str, job), str(work)], work)


def per_step(
    small: int, big: int, modes: tuple[Sync, ...], systems: tuple[str, ...] = SYSTEMS
) -> dict[tuple[str, str, str], float]:
    """Instructions per step of each (system, mode, shape), two processes each."""
    jobs = [
        (system, mode, shape, steps)
        for mode in modes
        for shape in SHAPES
        for system in systems
        for steps in (small, big)
    ]
    with tempfile.TemporaryDirectory() as tmp_dir, ThreadPoolExecutor(2) as pool:
        counts = dict(zip(jobs, pool.map(lambda j: measure(j, Path(tmp_dir)), jobs), strict=True))
    found: dict[tuple[str, str, str], float] = {}
    for system, mode, shape, _ in jobs:
        lo, hi = len(graph(shape, small)), len(graph(shape, big))
        low, high = counts[(system, mode, shape, small)], counts[(system, mode, shape, big)]
        found[(system, mode, shape)] = callgrind.per_unit(low, high, lo, hi)
    return found


def report(found: dict[tuple[str, str, str], float], small: int, big: int) -> list[str]:
    lines = [
        f"instructions per step (callgrind; the difference of a {small}- and a {big}-step "
        "run's processes ÷ the difference of their steps):",
        f"  {'synchronous':<12} {'graph':<8} {'Flotilla':>12} {'LangGraph':>12}  ratio",
    ]
    for mode in dict.fromkeys(m for _, m, _ in found):
        for shape in SHAPES:
            ours, theirs = (
                found.get(("Flotilla", mode, shape)),
                found.get(("LangGraph", mode, shape)),
            )
            ratio = f"{ours / theirs:.2f}" if ours and theirs else "–"
            lines.append(
                f"  {mode:<12} {shape:<8} {ours or 0:>12,.0f} {theirs or 0:>12,.0f}  {ratio}"
            )
    lines.append("Flotilla / LangGraph: goal <= 0.50")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--small", type=int, default=20, help="steps of the small run")
    parser.add_argument("--big", type=int, default=120, help="steps of the big run")
    parser.add_argument("--mode", choices=MODES, help="only this synchronous setting")
    parser.add_argument("--only", choices=SYSTEMS, help="measure only this system")
    parser.add_argument("--child", nargs=5, metavar=("SYSTEM", "MODE", "SHAPE", "STEPS", "DIR"))
    args = parser.parse_args()
    if args.child:
        system, mode, shape, steps, work = args.child
        child(system, mode, shape, int(steps), Path(work))
        return
    modes: tuple[Sync, ...] = (args.mode,) if args.mode else MODES
    systems = (args.only,) if args.only else SYSTEMS
    for line in report(per_step(args.small, args.big, modes, systems), args.small, args.big):
        print(line, flush=True)


if __name__ == "__main__":
    main()
