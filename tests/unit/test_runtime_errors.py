"""Error classification and summary bounds: pure functions of the runtime."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import (
    ModelHTTPError,
    ModelOverloadedError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestRejectedError,
)
from pydantic_ai.exceptions import (
    ModelConnectionError,
    ModelTimeoutError,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)

from flotilla.agents.core.errors import PermanentError, TransientError
from flotilla.agents.running.runtime import SUMMARY_MAX_CHARS, bounded_summary, classify_error


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (
            ModelHTTPError.for_category(ModelRateLimitError, status_code=429, model_name="m"),
            TransientError,
        ),
        (
            ModelHTTPError.for_category(ModelOverloadedError, status_code=529, model_name="m"),
            TransientError,
        ),
        (ModelHTTPError(502, "m"), TransientError),
        (ModelHTTPError(408, "m"), TransientError),
        (ModelConnectionError("m", "refused", phase="connect"), TransientError),
        (ModelTimeoutError("m", "slow"), TransientError),
        (TimeoutError(), TransientError),
        # OpenAI sends exhausted quota as a 429: waiting does not help
        (
            ModelHTTPError.for_category(ModelQuotaExceededError, status_code=429, model_name="m"),
            PermanentError,
        ),
        (
            ModelHTTPError.for_category(ModelRequestRejectedError, status_code=400, model_name="m"),
            PermanentError,
        ),
        (ModelHTTPError(404, "m"), PermanentError),
        (UsageLimitExceeded("too many tokens"), PermanentError),
        (UnexpectedModelBehavior("Exceeded maximum output retries (3)"), PermanentError),
        (KeyError("bug"), PermanentError),
    ],
)
def test_classification(exc: Exception, kind: type[Exception]) -> None:
    error = classify_error(exc)
    assert type(error) is kind
    assert error.retryable is (kind is TransientError)


def test_a_run_error_passes_through_unchanged() -> None:
    error = TransientError("x")
    assert classify_error(error) is error


def test_messages_are_sentences_without_bodies() -> None:
    error = classify_error(ModelHTTPError(400, "m", {"secret-ish": "body " * 100}))
    assert "body" not in str(error) and str(error).endswith(".")


@settings(max_examples=150, deadline=None)
@given(summary=st.text(max_size=2000), message=st.text(max_size=2000))
def test_summaries_are_bounded_and_deterministic(summary: str, message: str) -> None:
    out = bounded_summary(summary, message)
    assert len(out) <= SUMMARY_MAX_CHARS
    assert out == bounded_summary(summary, message)
    if summary.strip():
        assert out.split()[0].rstrip("…") in summary


def test_run_ends_map_to_plan_outcomes() -> None:
    from flotilla.agents.planning.plan import (
        FormField,
        FormSpec,
        StepBlocked,
        StepFailed,
        StepSucceeded,
    )
    from flotilla.agents.running.runtime import StepQuestion, StepRunResult, step_outcome

    done = step_outcome(StepRunResult("m", "s", ["F1"]), index=2, attempt=1, message_ts="1.2")
    assert done == StepSucceeded(index=2, attempt=1, summary="s", files=["F1"], message_ts="1.2")
    form = FormSpec(fields=[FormField(name="tier", label="Which tier?")])
    asked = step_outcome(StepQuestion("Which tier?", form, "call_1"), index=2, attempt=1)
    assert asked == StepBlocked(index=2, attempt=1, question="Which tier?", form=form)
    failed = step_outcome(TransientError("rate limited."), index=2, attempt=3)
    assert failed == StepFailed(index=2, attempt=3, reason="rate limited.", retryable=True)
