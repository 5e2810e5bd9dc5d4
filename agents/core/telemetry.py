"""Prometheus metrics of the agents layer: tokens, and model requests by outcome and latency.

One registry per process (`REGISTRY`); `bot/metrics.py` serves it beside the service's
own. Label values are lowercase words. The agents layer records here and never imports
`bot/`.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pydantic_ai.exceptions import (
    ModelConnectionError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelRequestRejectedError,
    ModelRequestTimeout,
    ModelTimeoutError,
)
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

REGISTRY = CollectorRegistry()
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)

TOKENS = Counter(
    "flotilla_model_tokens_total",
    "Tokens used, by workspace, agent, model and direction (input or output).",
    ["workspace", "agent", "model", "direction"],
    registry=REGISTRY,
)
MODEL_REQUESTS = Counter(
    "flotilla_model_requests_total",
    "Model requests, by model and outcome (succeeded, rate_limited, refused, timed_out, "
    "unreachable, failed).",
    ["model", "outcome"],
    registry=REGISTRY,
)
MODEL_SECONDS = Histogram(
    "flotilla_model_request_seconds",
    "Latency of model requests (one request of a run, the provider client's retries included).",
    ["model"],
    registry=REGISTRY,
    buckets=LATENCY_BUCKETS,
)


def count_tokens(
    workspace: str, agent: str, model: str, input_tokens: int, output_tokens: int
) -> None:
    """Add a run's newly spent tokens (called where they are stored)."""
    if input_tokens:
        TOKENS.labels(workspace, agent, model, "input").inc(input_tokens)
    if output_tokens:
        TOKENS.labels(workspace, agent, model, "output").inc(output_tokens)


def request_outcome(exc: BaseException | None) -> str:
    """The outcome label of a model request that raised `exc` (None: it succeeded)."""
    if exc is None:
        return "succeeded"
    if isinstance(exc, ModelRateLimitError) or (
        isinstance(exc, ModelHTTPError) and exc.status_code == 429
    ):
        return "rate_limited"
    if isinstance(exc, ModelRequestTimeout | ModelTimeoutError | TimeoutError):
        return "timed_out"
    if isinstance(exc, ModelConnectionError | ConnectionError):
        return "unreachable"
    if isinstance(exc, ModelRequestRejectedError) or (
        isinstance(exc, ModelHTTPError) and 400 <= exc.status_code < 500
    ):
        return "refused"
    return "failed"


class MeasuredModel(WrapperModel):
    """A model whose every request is counted by outcome and timed."""

    def __init__(self, wrapped: Model) -> None:
        super().__init__(wrapped)
        self.metric_label = f"{wrapped.system}:{wrapped.model_name}"

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        started = time.perf_counter()
        try:
            response = await super().request(messages, model_settings, model_request_parameters)
        except BaseException as exc:
            self._observe(started, exc)
            raise
        self._observe(started, None)
        return response

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        started = time.perf_counter()
        try:
            async with super().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as stream:
                yield stream
        except BaseException as exc:
            self._observe(started, exc)
            raise
        self._observe(started, None)

    def _observe(self, started: float, exc: BaseException | None) -> None:
        if exc is not None and not isinstance(exc, Exception):
            return  # cancelled (a stop or a timeout of the whole run): not the model's outcome
        MODEL_SECONDS.labels(self.metric_label).observe(time.perf_counter() - started)
        MODEL_REQUESTS.labels(self.metric_label, request_outcome(exc)).inc()


def measured(model: Model) -> Model:
    """`model`, counting and timing its requests (a model measured already stays as it is)."""
    return model if isinstance(model, MeasuredModel) else MeasuredModel(model)


# --- the scheduler (agents/scheduling/admission.py) -----------------------------------------------

QUEUE_BUCKETS = (0.05, 0.25, 1, 5, 15, 60, 300, 900, 3600)
QUEUE_DEPTH = Gauge(
    "flotilla_queue_depth",
    "Runs waiting for a slot, by tenant (workspace:channel) and priority (1 urgent … 5 batch).",
    ["tenant", "priority"],
    registry=REGISTRY,
)
QUEUE_SECONDS = Histogram(
    "flotilla_queue_seconds",
    "Time a run waited in the scheduler's queue before it was granted a slot.",
    registry=REGISTRY,
    buckets=QUEUE_BUCKETS,
)
ADMISSIONS_REFUSED = Counter(
    "flotilla_admissions_refused_total",
    "Runs not admitted in a pass, by reason (capacity, agent, tool, budget): counted when "
    "a run's reason changes.",
    ["reason"],
    registry=REGISTRY,
)
PREEMPTIONS = Counter(
    "flotilla_preemptions_total",
    "Batch runs paused at a model-turn boundary for urgent work.",
    registry=REGISTRY,
)
BUDGET_REMAINING = Gauge(
    "flotilla_budget_remaining_tokens",
    "Tokens a workspace or channel may still spend in its tightest budget period.",
    ["scope"],
    registry=REGISTRY,
)
_depth_labels: set[tuple[str, str]] = set()


def queue_depth(queue: Iterable[Any]) -> None:
    """Set the queue depth per tenant and priority from the queue's rows."""
    depth: dict[tuple[str, str], int] = {}
    for r in queue:
        if r.state != "granted":
            labels = (f"{r.team_id}:{r.channel_id}", str(r.priority))
            depth[labels] = depth.get(labels, 0) + 1
    for labels in _depth_labels - depth.keys():
        QUEUE_DEPTH.labels(*labels).set(0)
    for labels, n in depth.items():
        QUEUE_DEPTH.labels(*labels).set(n)
    _depth_labels.update(depth)


def admitted(waited: timedelta) -> None:
    QUEUE_SECONDS.observe(max(0.0, waited.total_seconds()))


def refused(reason: str) -> None:
    ADMISSIONS_REFUSED.labels(reason).inc()


def preempted() -> None:
    PREEMPTIONS.inc()


def budget_remaining(budgets: Mapping[str, Any]) -> None:
    for scope, budget in budgets.items():
        BUDGET_REMAINING.labels(scope).set(budget.remaining)
