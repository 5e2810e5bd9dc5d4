"""One experiment per module, run once (it starts real processes) and read by its tests."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bench.chaos.measure import Figures


def run_once(experiment: Callable[[Path], Coroutine[Any, Any, Figures]]) -> Figures:
    """Run `experiment` in a temporary folder on its own event loop and print its table
    (shown with `pytest -s`, and in the report of a failing test)."""
    with tempfile.TemporaryDirectory(prefix="flotilla-chaos-test-") as tmp:
        figures = asyncio.run(experiment(Path(tmp)))
    print(figures.table())
    return figures
