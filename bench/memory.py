"""Benchmark: the process's memory with many paused plans (RSS, counted in bytes).

On a SQLite file: creates N conversations, starts a plan in each through the real
`Reconciler` (a user step first, so every plan pauses on a form) and looks each
conversation up through the executor's `Context`, as the executor does when it performs
the plan's effects. Prints the resident set size (VmRSS) of the process once everything
is imported and the database migrated ("empty"), after the plans, and their ratio, with
the entries the in-memory caches hold (bounded: the reconciler's plans and the context's
conversations keep at most 1,000 each by default).

Usage: .venv/bin/python bench/memory.py [--plans N] [--before]

`--before` keeps every conversation in the context, as the unbounded dict did before.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flotilla.agents.core.lru import LRUCache  # noqa: E402
from flotilla.agents.planning.plan import FormField, FormSpec, Step  # noqa: E402
from flotilla.agents.reconciling.reconciler import Reconciler  # noqa: E402
from flotilla.agents.running.run_context import Context, ExecutorOptions  # noqa: E402
from flotilla.storage.conversations import open_conversation  # noqa: E402
from flotilla.storage.db import Database  # noqa: E402
from flotilla.storage.migrate import upgrade  # noqa: E402

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FORM = FormSpec(fields=[FormField(name="tier", label="Which tier?")])


def rss() -> int:
    """This process's resident set size in bytes (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def paused_plan() -> list[Step]:
    return [
        Step(index=1, title="Pick a tier", assignee="user", form=FORM),
        Step(index=2, title="Write", assignee="writer", input="{{step_1.output_summary}}"),
    ]


async def measure(plans: int, folder: Path, *, before: bool = False) -> dict[str, Any]:
    db = Database(f"sqlite+aiosqlite:///{folder / 'memory.db'}")
    await upgrade(db)
    reconciler = Reconciler(db, clock=lambda: NOW)
    parts: dict[str, Any] = dict(
        db=db,
        reconciler=reconciler,
        port=None,
        choose_model=None,
        clock=lambda: NOW,
        options=ExecutorOptions(),
        observer=None,
    )
    if before:  # the context's conversations as before this change: a dict, never emptied
        parts["conversations"] = LRUCache[int, Any](sys.maxsize)
    context = Context(**parts)
    gc.collect()
    empty = rss()
    for start in range(0, plans, 500):
        async with db.write() as conn:
            ids = [
                (
                    await open_conversation(
                        conn,
                        team_id="T1",
                        channel_id="C1",
                        thread_ts=f"{i}.0",
                        requested_by="U1",
                        request_text=f"request {i}",
                        now=NOW,
                    )
                ).id
                for i in range(start, min(start + 500, plans))
            ]
        for conversation_id in ids:
            decision = await reconciler.start_steps(conversation_id, paused_plan())
            assert decision.plan.steps[0].status != "pending"  # the form is out: paused
            await context.conversation(conversation_id)
    gc.collect()
    after = rss()
    await db.dispose()
    return {
        "empty": empty,
        "after": after,
        "plans cached": len(reconciler._cache),
        "conversations cached": len(context.conversations),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--plans", type=int, default=10_000)
    parser.add_argument("--before", action="store_true", help="unbounded conversations, as before")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        figures = asyncio.run(measure(args.plans, Path(folder), before=args.before))
    mib = 1024 * 1024
    print(f"RSS empty process:            {figures['empty'] / mib:8.1f} MiB")
    print(f"RSS after {args.plans:,} paused plans: {figures['after'] / mib:8.1f} MiB")
    print(f"ratio:                        {figures['after'] / figures['empty']:8.2f}x")
    print(
        f"reconciler plans cached: {figures['plans cached']:,}; "
        f"context conversations cached: {figures['conversations cached']:,}"
    )


if __name__ == "__main__":
    main()
