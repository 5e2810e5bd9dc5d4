"""Experiment 5, small: generated bad input (hypothesis) POSTed to a running `flotilla run`,
unsigned and then signed. Never a 500, no traceback for unsigned input, nothing stored and
nothing sent to Slack, and the process keeps serving."""

from __future__ import annotations

import pytest

from bench.chaos.bad_inputs import bad_inputs
from bench.chaos.measure import Figures
from tests.chaos.conftest import run_once

SEED = 15
# one experiment for all the tests of this module: they run in one xdist worker
pytestmark = pytest.mark.xdist_group("chaos_bad_inputs")
COUNT = 200


@pytest.fixture(scope="module")
def figures() -> Figures:
    return run_once(lambda folder: bad_inputs(folder, SEED, COUNT))


def test_every_input_was_sent_both_ways(figures: Figures) -> None:
    assert figures.number("requests sent") == 2 * COUNT


def test_never_a_500(figures: Figures) -> None:
    assert figures.number("HTTP 500 answers") == 0


def test_unsigned_input_is_refused_without_a_traceback(figures: Figures) -> None:
    assert figures.number("tracebacks logged for unsigned input") == 0
    statuses = figures.rows["HTTP statuses, unsigned"]
    assert "200:" not in statuses and "500:" not in statuses


def test_bad_input_stores_nothing_and_sends_nothing_to_slack(figures: Figures) -> None:
    assert figures.number("rows stored from the input") == 0
    assert figures.number("Slack writes caused (posts, views)") == 0
    assert figures.rows["process still serving"] == "yes"
    assert figures.number("secrets found in logs") == 0


def test_signed_bad_input_logs_no_traceback_and_gets_no_404(figures: Figures) -> None:
    assert figures.number("tracebacks logged for signed input") == 0
    assert "404:" not in figures.rows["HTTP statuses, signed"]
