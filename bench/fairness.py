"""Fairness of the scheduler's policy (agents/scheduling/scheduler.py `admit`) against plain FIFO.

A skewed mix: tenant A submits 100 runs first, tenants B–E 5 each just after; 4 slots.
Two models: zero latency (every run finishes before the next pass) and a fixed time per
run (each run holds its slot for 3 passes). Printed side by side, FIFO and fair, in one
run: each tenant's share of run slots while all tenants are backlogged, Jain's fairness
index over those shares, and the small tenants' p95 wait (in passes).

This measures the policy on its own (the pure core, no database, no Slack): it is the
figure the wired scheduler must reproduce end to end. Run: `python bench/fairness.py`.
"""

from __future__ import annotations

import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flotilla.agents.scheduling.scheduler import Limits, Running, RunRequest, admit  # noqa: E402

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
SMALL = "BCDE"


def workload() -> list[RunRequest]:
    runs = [RunRequest(f"A-{i}", "A", "researcher", T0 + timedelta(seconds=i)) for i in range(100)]
    for tenant in SMALL:
        runs += [
            RunRequest(f"{tenant}-{i}", tenant, "researcher", T0 + timedelta(seconds=100 + i))
            for i in range(5)
        ]
    return runs


def fifo(waiting: list[RunRequest], running: list[Running], capacity: int) -> list[str]:
    free = capacity - len(running)
    return [r.key for r in sorted(waiting, key=lambda r: (r.enqueued_at, r.key))[:free]]


def simulate(policy: str, hold: int) -> tuple[Counter[str], dict[str, int]]:
    """Run passes until all is done; slot shares while all are backlogged, and waits."""
    waiting = workload()
    running: list[tuple[Running, int]] = []  # (run, passes left)
    shares: Counter[str] = Counter()
    served: Counter[str] = Counter()
    waited: dict[str, int] = {}
    for step in range(10_000):
        if not waiting and not running:
            break
        now = [r for r, _ in running]
        if policy == "fair":
            grants = list(admit(waiting, now, Limits(capacity=4), T0, served=served).grants)
        else:
            grants = fifo(waiting, now, 4)
        for request in [r for r in waiting if r.key in grants]:
            running.append((Running(request.key, request.tenant, request.agent, T0), hold))
            served[request.tenant] += 1
            waited[request.key] = step
        waiting = [r for r in waiting if r.key not in grants]
        if all(any(r.tenant == t for r in waiting) for t in "A" + SMALL):
            shares.update(r.tenant for r, _ in running)
        running = [(r, left - 1) for r, left in running if left > 1]
    return shares, waited


def jain(counts: list[int]) -> float:
    total = sum(c * c for c in counts)
    return sum(counts) ** 2 / (len(counts) * total) if total else 0.0


def p95(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def main() -> None:
    print("policy  model            shares while backlogged (A B C D E)   Jain   small p95 wait")
    for hold, model in ((1, "zero latency"), (3, "3 passes per run")):
        for policy in ("fifo", "fair"):
            shares, waited = simulate(policy, hold)
            counts = [shares[t] for t in "A" + SMALL]
            small = [w for key, w in waited.items() if key[0] in SMALL]
            print(
                f"{policy:6}  {model:16} {' '.join(f'{c:4}' for c in counts):38}"
                f" {jain(counts):5.2f}  {p95(small):4} passes"
            )


if __name__ == "__main__":
    main()
