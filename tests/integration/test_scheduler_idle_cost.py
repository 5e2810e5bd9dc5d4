"""The idle scheduler's cost, counted: with one process and nobody waiting, a scheduled
run's job sends about the round trips and transactions of an unscheduled one (the slot is
granted in the claim's transaction, ended in the settle's) – pinned at ≤ 10 % of a
reconcile step's 7 round trips (bench/scheduler.py --only idle reports the figure)."""

from __future__ import annotations

from pathlib import Path

from bench.scheduler_idle import per_run_cost

RECONCILE_STEP_ROUND_TRIPS = 7  # bench/reconcile.py, bench/README.md


async def test_a_scheduled_run_costs_at_most_a_tenth_of_a_reconcile_more(tmp_path: Path) -> None:
    plain = await per_run_cost(tmp_path / "plain", 30, scheduled=False)
    plain_trips, plain_transactions = plain[0], plain[1]
    trips, transactions, _, passes = await per_run_cost(tmp_path / "sched", 30, scheduled=True)
    assert trips - plain_trips <= 0.1 * RECONCILE_STEP_ROUND_TRIPS, (trips, plain_trips)
    assert transactions - plain_transactions <= 0.1, (transactions, plain_transactions)
    assert passes <= 2  # the loop's first look, perhaps one poll: none per run
