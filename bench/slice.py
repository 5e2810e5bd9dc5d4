"""Benchmark: one plan end to end through the Slack layer, counting Slack calls per step.

Runs the walkthrough's diamond (5 steps: two agents, a form, a writer, the synthesis) on
the local stack – the local Slack workspace, Flotilla's real Bolt app over HTTP, a SQLite
file and the offline model – several times, and prints:

- the Web API calls Flotilla made per plan and per step, by method;
- the median wall time of a plan, from the mention to the synthesis (the offline model
  answers at once, so this is Flotilla's own overhead plus loopback HTTP);
- the database transactions and statements per step, by kind, counted on every SQLite
  connection (the aiosqlite engine and the stdlib driver's worker-thread path), from the
  mention until the process is at rest (`at_rest`: the rows it delivered marked sent, no
  read made to find out);
- with `--callers`, the statements attributed to the call sites that sent them.

Usage: .venv/bin/python bench/slice.py [--runs N] [--callers] [--warm]

`--warm` counts each process's second plan: what a running process keeps (the roster, the
workspace's Slack features, the admission facts within their poll interval) is kept.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests/

from flotilla.bot.local import start_local_stack  # noqa: E402
from flotilla.local_slack import Driver  # noqa: E402
from tests.db_counts import DbCounts, counting  # noqa: E402
from tests.e2e.slice.diamond import STEPS, at_rest, walk_diamond  # noqa: E402


async def one_plan(
    folder: Path, index: int, callers: bool, warm: bool = False
) -> tuple[float, Counter[str], DbCounts]:
    with counting(callers=callers) as counts:
        stack = await start_local_stack(f"sqlite+aiosqlite:///{folder / f'bench{index}.db'}")
        try:
            driver = Driver(stack.workspace, default_timeout=60)
            if warm:  # a plan first, not counted: what a running process keeps is kept
                await walk_diamond(driver, stack.commander)
                await stack.service.settle()
            stack.workspace.api_log.clear()
            await stack.service.settle()
            counts.reset()
            began = time.perf_counter()
            await walk_diamond(driver, stack.commander)
            await at_rest(driver, stack.service)
            elapsed = time.perf_counter() - began
            calls = Counter(method for method, _result in stack.workspace.api_log)
            return elapsed, calls, counts
        finally:
            await stack.stop()


def _per_step(counter: Counter[str]) -> str:
    return ", ".join(f"{kind} {n / STEPS:.1f}" for kind, n in counter.most_common())


async def main(runs: int, callers: bool, warm: bool = False) -> None:
    with tempfile.TemporaryDirectory() as folder:
        results = [await one_plan(Path(folder), i, callers, warm) for i in range(runs)]
    times = [r[0] for r in results]
    calls = results[-1][1]
    counts = results[-1][2]
    total = sum(calls.values())
    after = ", each the process's second plan (--warm)" if warm else ""
    print(f"diamond plan ({STEPS} steps) end to end on the local stack, {runs} runs{after}")
    print(f"  median wall time per plan: {statistics.median(times) * 1000:,.0f} ms")
    print(f"  median per step:           {statistics.median(times) * 1000 / STEPS:,.0f} ms")
    print(f"  Slack Web API calls per plan: {total} ({total / STEPS:.1f} per step)")
    for method, count in calls.most_common():
        print(f"    {method:<28} {count:>3}")
    txns, stmts = counts.transaction_total, counts.statement_total
    print(
        f"  database transactions per plan: {txns} ({txns / STEPS:.1f} per step); "
        f"statements: {stmts} ({stmts / STEPS:.1f} per step)"
    )
    spread = [(r[2].transaction_total, r[2].statement_total) for r in results]
    print(f"  (transactions, statements) per plan in each run: {spread}")
    print(f"  transactions per step by kind: {_per_step(counts.transactions)}")
    print("  statements per plan by kind:")
    for kind, count in counts.statements.most_common():
        print(f"    {kind:<28} {count:>3}")
    if callers:
        print("  statements per plan by call site (SQLAlchemy-sent only):")
        for site, count in counts.callers.most_common():
            print(f"    {count:>3}  {site}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--callers", action="store_true", help="statements by call site")
    parser.add_argument(
        "--warm", action="store_true", help="count each process's second plan, not its first"
    )
    arguments = parser.parse_args()
    asyncio.run(main(arguments.runs, arguments.callers, arguments.warm))
