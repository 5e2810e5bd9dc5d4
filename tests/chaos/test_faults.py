"""Experiment 4, small: Slack answers 429 (its rate limits, and 15 % of calls on top) and
delivers every event four times; the model fails 30 % of requests (500, 429, 503, a hang).
Every plan finishes or is stopped with a sentence; nothing is lost, posted twice, or paid
twice; Flotilla never answers Slack with a 500."""

from __future__ import annotations

import pytest

from bench.chaos.drive import Window
from bench.chaos.faults import slack_and_model_faults
from bench.chaos.measure import Figures
from tests.chaos.conftest import run_once

SEED = 15
# one experiment for all the tests of this module: they run in one xdist worker
pytestmark = pytest.mark.xdist_group("chaos_faults")


@pytest.fixture(scope="module")
def figures() -> Figures:
    return run_once(
        lambda folder: slack_and_model_faults(folder, Window(4, 4, 150), SEED, hang_seconds=2.0)
    )


def test_the_faults_happened(figures: Figures) -> None:
    assert figures.number("Slack 429s answered") > 0
    assert figures.rows["model faults injected"] != "none"


def test_every_request_is_answered(figures: Figures) -> None:
    assert figures.number("requests lost") == 0


def test_four_deliveries_of_each_event_give_one_dispatch_and_one_answer(
    figures: Figures,
) -> None:
    assert figures.number("duplicate dispatches") == 0
    assert figures.number("duplicate answers") == 0
    assert figures.number("duplicate notices") == 0


def test_no_finished_model_call_is_paid_again(figures: Figures) -> None:
    assert figures.number("model calls paid twice") == 0


def test_slack_never_gets_a_500_and_the_log_keeps_secrets(figures: Figures) -> None:
    assert "500:" not in figures.rows["HTTP statuses to Slack's deliveries"]
    assert figures.number("secrets found in logs") == 0
    assert figures.number("tracebacks logged") == 0
