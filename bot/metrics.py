"""Prometheus metrics of one Flotilla process, served at `/metrics` in both modes.

Queue time and inference time are kept apart (scheduler.md): `queue_seconds` is the wait
from a step's dispatch being decided to its run starting, `run_seconds` the run itself.
One registry per service, so several services in one process (tests) do not collide; the
agents layer's metrics (`agents/core/telemetry.py`: tokens, model requests) and the standard
process and Python collectors are per process and served beside them. Label values are
lowercase words.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from sqlalchemy import Table, func, select

from flotilla.agents.core import telemetry
from flotilla.storage.db import Database
from flotilla.storage.tables import OutboxEntry

BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
FAST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
OUTBOX: Table = OutboxEntry.__table__  # type: ignore[assignment]

# the standard collectors live in prometheus_client's default registry: serve it too
_PROCESS = CollectorRegistry(auto_describe=True)
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    _PROCESS.register(_collector)


def word(value: str) -> str:
    """A label value as a lowercase word: `StepSucceeded` -> `succeeded`, `Rate Limited` ->
    `rate_limited`."""
    value = re.sub(r"^Step(?=[A-Z])", "", value.strip())
    value = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", value)
    return re.sub(r"[^a-z0-9]+", "_", value.lower()).strip("_") or "unknown"


class _Words:
    """A labelled metric whose label values are turned into lowercase words."""

    def __init__(self, metric: Counter | Histogram) -> None:
        self.metric = metric

    def labels(self, *values: str) -> Any:
        return self.metric.labels(*(word(str(v)) for v in values))


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.dispatches = Counter(
            "flotilla_dispatches_total",
            "Steps dispatched, by kind of assignee.",
            ["kind"],
            registry=self.registry,
        )
        self._outcomes = Counter(
            "flotilla_step_outcomes_total",
            "Outcomes reported for dispatched steps (succeeded, failed, blocked …).",
            ["outcome"],
            registry=self.registry,
        )
        self.outcomes = _Words(self._outcomes)
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
        self.slack_calls = Counter(
            "flotilla_slack_api_calls_total",
            "Slack Web API calls (each HTTP attempt), by method and outcome "
            "(ok, error, rate_limited, server_error, unreachable).",
            ["method", "outcome"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "flotilla_slack_request_seconds",
            "Handling of a request from Slack until it is acknowledged, by kind "
            "(event, interaction, command).",
            ["kind"],
            registry=self.registry,
            buckets=FAST_BUCKETS,
        )
        self.outbox_pending = Gauge(
            "flotilla_outbox_pending",
            "Outbox rows waiting to be delivered (read at scrape time).",
            registry=self.registry,
        )
        self.outbox_oldest_seconds = Gauge(
            "flotilla_outbox_oldest_pending_seconds",
            "Age of the oldest outbox row waiting to be delivered (0 when none).",
            registry=self.registry,
        )
        self.processed_events_pruned = Counter(
            "flotilla_processed_events_pruned_total",
            "Processed-event ids deleted after the retention period.",
            registry=self.registry,
        )

    async def refresh(self, db: Database, now: datetime | None = None) -> None:
        """Read the outbox backlog from the database (called before each scrape)."""
        async with db.read() as conn:
            row = (
                await conn.execute(
                    select(func.count(), func.min(OUTBOX.c.created_at)).where(
                        OUTBOX.c.state == "pending"
                    )
                )
            ).one()
        count, oldest = int(row[0] or 0), row[1]
        self.outbox_pending.set(count)
        if oldest is None:
            self.outbox_oldest_seconds.set(0)
            return
        if isinstance(oldest, str):  # SQLite's MIN() bypasses the column type
            oldest = datetime.fromisoformat(oldest)
        if oldest.tzinfo is None:
            oldest = oldest.replace(tzinfo=UTC)
        age = ((now or datetime.now(UTC)) - oldest).total_seconds()
        self.outbox_oldest_seconds.set(max(0.0, age))

    def exposition(self) -> bytes:
        return b"".join(
            generate_latest(registry) for registry in (self.registry, telemetry.REGISTRY, _PROCESS)
        )


class SlackCallMeter(AsyncRetryHandler):
    """Counts every Web API attempt by method and outcome; never asks for a retry.

    Put first in a client's `retry_handlers`: slack_sdk shows each response (and each
    connection error) to the handlers in order.
    """

    def __init__(self, calls: Counter) -> None:
        super().__init__(max_retry_count=0)
        self.calls = calls

    async def can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        method = request.url.rstrip("/").rsplit("/", 1)[-1] or "unknown"
        self.calls.labels(method, _call_outcome(response, error)).inc()
        return False


def _call_outcome(response: HttpResponse | None, error: Exception | None) -> str:
    if error is not None or response is None:
        return "unreachable"
    if response.status_code == 429:
        return "rate_limited"
    if response.status_code >= 500:
        return "server_error"
    body = response.body if isinstance(response.body, dict) else {}
    return "ok" if response.status_code == 200 and body.get("ok", True) else "error"


def meter(client: Any, metrics: Metrics) -> None:
    """Count the Web API calls of `client` (an `AsyncWebClient`) in `metrics`."""
    handlers = client.retry_handlers
    if not any(isinstance(h, SlackCallMeter) for h in handlers):
        handlers.insert(0, SlackCallMeter(metrics.slack_calls))
