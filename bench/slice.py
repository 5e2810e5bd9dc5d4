"""Benchmark: one plan end to end through the Slack layer, counting Slack calls per step.

Runs the walkthrough's diamond (5 steps: two agents, a form, a writer, the synthesis) on
the local stack – the local Slack workspace, Flotilla's real Bolt app over HTTP, a SQLite
file and the offline model – several times, and prints:

- the Web API calls Flotilla made per plan and per step, by method;
- the median wall time of a plan, from the mention to the synthesis (the offline model
  answers at once, so this is Flotilla's own overhead plus loopback HTTP);
- the database statements per plan.

Usage: .venv/bin/python bench/slice.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import event

from bot.local import start_local_stack
from bot.views.forms import OPEN_ACTION
from local_slack import Driver

REQUEST = "compare our pricing with the top three competitors and draft a note for the sales team"
STEPS = 5


async def one_plan(folder: Path, index: int) -> tuple[float, Counter[str], int]:
    stack = await start_local_stack(f"sqlite+aiosqlite:///{folder / f'bench{index}.db'}")
    statements = 0

    def count(*_args: Any) -> None:
        nonlocal statements
        statements += 1

    engines = [stack.service.db.engine.sync_engine]
    for engine in engines:
        event.listen(engine, "before_cursor_execute", count)
    try:
        driver = Driver(stack.workspace, default_timeout=60)
        stack.workspace.api_log.clear()
        statements = 0
        began = time.perf_counter()
        root = driver.mention("maya", "launch", stack.commander, REQUEST)
        form = await driver.thread_has_message("launch", root.ts, containing="needs your input")
        await driver.click("maya", form, OPEN_ACTION)
        await driver.wait_for(lambda: driver.state.top_modal(driver.person("maya").id))
        await driver.submit("maya", {"field:tiers": "Pro"})
        await driver.thread_has_message("launch", root.ts, containing="commander: Review")
        await stack.service.settle()
        elapsed = time.perf_counter() - began
        calls = Counter(method for method, _result in stack.workspace.api_log)
        return elapsed, calls, statements
    finally:
        await stack.stop()


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        results = [await one_plan(Path(folder), i) for i in range(runs)]
    times = [r[0] for r in results]
    calls = results[-1][1]
    total = sum(calls.values())
    print(f"diamond plan ({STEPS} steps) end to end on the local stack, {runs} runs")
    print(f"  median wall time per plan: {statistics.median(times) * 1000:,.0f} ms")
    print(f"  median per step:           {statistics.median(times) * 1000 / STEPS:,.0f} ms")
    print(f"  Slack Web API calls per plan: {total} ({total / STEPS:.1f} per step)")
    for method, count in calls.most_common():
        print(f"    {method:<28} {count:>3}")
    print(f"  database statements per plan (aiosqlite engine): {results[-1][2]}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    asyncio.run(main(parser.parse_args().runs))
