"""Prometheus metrics of one Flotilla process, served at `/metrics` in HTTP mode.

Queue time and inference time are kept apart (scheduler.md): `queue_seconds` is the wait
from a step's dispatch being decided to its run starting, `run_seconds` the run itself.
One registry per service, so several services in one process (tests) do not collide.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.dispatches = Counter(
            "flotilla_dispatches_total",
            "Steps dispatched, by kind of assignee.",
            ["kind"],
            registry=self.registry,
        )
        self.outcomes = Counter(
            "flotilla_step_outcomes_total",
            "Outcomes reported for dispatched steps.",
            ["outcome"],
            registry=self.registry,
        )
        self.queue_seconds = Histogram(
            "flotilla_step_queue_seconds",
            "From a step's dispatch being decided to its run starting.",
            registry=self.registry,
            buckets=BUCKETS,
        )
        self.run_seconds = Histogram(
            "flotilla_step_run_seconds",
            "Duration of agent runs (model and tool time), by agent.",
            ["agent"],
            registry=self.registry,
            buckets=BUCKETS,
        )
        self.commander_turns = Counter(
            "flotilla_commander_turns_total",
            "Commander turns, by result.",
            ["result"],
            registry=self.registry,
        )
        self.jobs = Gauge(
            "flotilla_jobs_running", "Agent runs and turns in progress.", registry=self.registry
        )

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
