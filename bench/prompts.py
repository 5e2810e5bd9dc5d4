"""Benchmark: prompt characters per step on a 20-step chain, before and after the window.

Runs a chain of `{{step_N.output_summary}}` steps through the real reconciler and runtime
on a SQLite file (no Slack: the thread is stored as the Slack port stores it; the model is
a pydantic-ai FunctionModel that records each step's first message – see
`tests/integration/prompt_chain.py`). For every step it prints the prompt's characters
under the old rule (the last 20 thread messages, 400 characters each, computed on the same
thread) and as sent now (the thread window without what the step already gets, at most
4,000 characters), and the ratio step N / step 2 of both. Counted, not timed: the figures
are the same on a busy machine.

Usage: .venv/bin/python bench/prompts.py [--steps N] [--interject-after K]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flotilla.storage.db import Database  # noqa: E402
from flotilla.storage.migrate import upgrade  # noqa: E402
from tests.integration.prompt_chain import Chain, run_chain  # noqa: E402


async def measure(steps: int, interject_after: int | None) -> Chain:
    with tempfile.TemporaryDirectory() as folder:
        db = Database(f"sqlite+aiosqlite:///{Path(folder) / 'prompts.db'}")
        try:
            await upgrade(db)
            return await run_chain(db, steps, interject_after=interject_after)
        finally:
            await db.dispose()


def report(chain: Chain) -> None:
    print(f"{'step':>4} | {'before (chars)':>14} | {'after (chars)':>13}")
    for p in chain.prompts:
        print(f"{p.step:>4} | {len(p.before):>14,} | {len(p.after):>13,}")
    last = len(chain.prompts)
    before_2, after_2 = chain.chars(2)
    before_n, after_n = chain.chars(last)
    print(
        f"step {last} / step 2: before {before_n / before_2:.2f}x, after {after_n / after_2:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--interject-after", type=int, default=None)
    args = parser.parse_args()
    report(asyncio.run(measure(args.steps, args.interject_after)))


if __name__ == "__main__":
    main()
