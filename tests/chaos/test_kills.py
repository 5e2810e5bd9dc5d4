"""Experiment 2, small: one `flotilla run` on SQLite killed with SIGKILL at random moments
while plans run, restarted each time. Nothing is dispatched or answered twice, every plan
finishes, no traceback and no secret reaches the log."""

from __future__ import annotations

import pytest

from bench.chaos.drive import Window
from bench.chaos.kills import sqlite_kills
from bench.chaos.measure import Figures
from tests.chaos.conftest import run_once

SEED = 15
# one experiment for all the tests of this module: they run in one xdist worker
pytestmark = pytest.mark.xdist_group("chaos_kills")
BURST = 5  # mentions at once before the kills


@pytest.fixture(scope="module")
def figures() -> Figures:
    return run_once(
        lambda folder: sqlite_kills(folder, Window(5, 15, 120), SEED, kills=3, burst=BURST)
    )


def test_every_kill_happened_and_plans_were_sent(figures: Figures) -> None:
    assert figures.number("kills (SIGKILL)") == 3
    assert figures.number("plans requested (mentions)") == 5 + BURST


def test_nothing_is_dispatched_or_answered_twice(figures: Figures) -> None:
    assert figures.number("duplicate dispatches") == 0
    assert figures.number("duplicate answers") == 0
    assert figures.number("duplicate notices") == 0


def test_no_request_is_lost(figures: Figures) -> None:
    assert figures.number("requests lost") == 0
    assert figures.number("plans completed (final answer posted)") == 5 + BURST


def test_no_traceback_and_no_secret_in_the_logs(figures: Figures) -> None:
    assert figures.number("secrets found in logs") == 0
    assert figures.number("tracebacks logged") == 0
