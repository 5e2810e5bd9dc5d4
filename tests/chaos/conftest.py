"""One experiment per module, run once (it starts real processes) and read by its tests."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bench.chaos.measure import Figures
from bench.chaos.stack import LOG_NAME

SHOWN_LOG_LINES = 80  # the processes' warnings and errors a failing test's report shows


def run_once(experiment: Callable[[Path], Coroutine[Any, Any, Figures]]) -> Figures:
    """Run `experiment` in a temporary folder on its own event loop and print its table
    and the processes' warnings and errors (shown with `pytest -s`, and in the report of a
    failing test)."""
    with tempfile.TemporaryDirectory(prefix="flotilla-chaos-test-") as tmp:
        figures = asyncio.run(experiment(Path(tmp)))
        log = Path(tmp) / LOG_NAME
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    print(figures.table())
    noted = [line for line in lines if '"level": "WARNING"' in line or '"level": "ERROR"' in line]
    print(f"\nthe processes' warnings and errors ({len(noted)}, the last {SHOWN_LOG_LINES}):")
    print("\n".join(noted[-SHOWN_LOG_LINES:]))
    return figures
