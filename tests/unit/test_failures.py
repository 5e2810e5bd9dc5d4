"""classify_error: operators read what to fix, people read one safe sentence."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import ModelHTTPError, ModelRateLimitError
from pydantic_ai.exceptions import (
    ModelAuthenticationError,
    ModelConnectionError,
    ModelNotFoundError,
    ModelTimeoutError,
    UserError,
)

from flotilla.agents.core.errors import PermanentError, RunError, TransientError
from flotilla.agents.core.failures import PUBLIC_RETRYING, PUBLIC_UNREACHABLE, classify_error

MODEL = "openai:gpt-4.1"


def http(status: int, category: Any = None) -> ModelHTTPError:
    body = {"error": {"message": "Incorrect API key provided: sk-abc…"}}
    if category is None:
        return ModelHTTPError(status, "gpt-4.1", body)
    return ModelHTTPError.for_category(
        category,
        status_code=status,
        model_name="gpt-4.1",
        body=body,
    )


@pytest.mark.parametrize(
    ("exc", "kind", "in_detail", "public"),
    [
        (http(401, ModelAuthenticationError), PermanentError, "HTTP 401", PUBLIC_UNREACHABLE),
        (http(403, ModelAuthenticationError), PermanentError, "HTTP 403", PUBLIC_UNREACHABLE),
        (http(404, ModelNotFoundError), PermanentError, "HTTP 404", PUBLIC_UNREACHABLE),
        (http(429, ModelRateLimitError), TransientError, "HTTP 429", PUBLIC_RETRYING),
        (ModelTimeoutError("gpt-4.1", "slow"), TransientError, "timed out", PUBLIC_RETRYING),
        (
            ModelConnectionError("gpt-4.1", "refused", phase="connect"),
            TransientError,
            "could not connect",
            PUBLIC_UNREACHABLE,
        ),
    ],
)
def test_each_failure_has_its_own_detail_and_a_safe_public_sentence(
    exc: Exception, kind: type[RunError], in_detail: str, public: str
) -> None:
    error = classify_error(exc, MODEL)
    assert type(error) is kind
    assert in_detail in error.detail and error.detail == str(error)
    assert "gpt-4.1" in error.detail
    assert error.public == public
    assert "sk-" not in error.detail + error.public  # no response body in either text


def test_401_403_and_404_read_differently_and_name_what_to_fix() -> None:
    details = {s: classify_error(http(s), MODEL).detail for s in (401, 403, 404)}
    assert len(set(details.values())) == 3
    assert "OPENAI_API_KEY" in details[401]
    assert "FLOTILLA_MODEL" in details[404] and "OPENAI_BASE_URL" in details[404]
    assert "ANTHROPIC_API_KEY" in classify_error(http(401), "anthropic:claude").detail


def test_pydantic_ai_advice_never_reaches_people() -> None:
    advice = UserError("Set the `OPENAI_API_KEY` environment variable. Use `Agent('test')`.")
    error = classify_error(advice, MODEL)
    assert "Agent('test')" not in error.public and error.public == PUBLIC_UNREACHABLE
    assert not error.retryable


def test_a_flotilla_sentence_is_its_own_public_text() -> None:
    error = PermanentError("The stored run has no final answer.")
    assert error.public == error.detail == "The stored run has no final answer."
    custom = TransientError("Slack answered 503", public="Slack is slow; trying again.")
    assert custom.public != custom.detail and custom.retryable


def test_the_advice_for_an_endpoint_fits_the_provider() -> None:
    refused = ModelConnectionError("claude", "refused", phase="connect")
    anthropic = classify_error(refused, "anthropic:claude").detail
    assert "could not connect" in anthropic and "Anthropic's API" in anthropic
    assert "OPENAI" not in anthropic
    assert "OPENAI_BASE_URL" in classify_error(refused, "openai:gpt-4.1").detail
    not_found = classify_error(http(404), "anthropic:claude").detail
    assert "check FLOTILLA_MODEL" in not_found and "OPENAI" not in not_found
    assert "base URL" not in not_found
