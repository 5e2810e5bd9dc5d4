"""One retry policy: its waits and tries, a provider's or Slack's Retry-After carried on the
error and honoured, the step policy set by an operator and applied by the plan's rules."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from pydantic_ai.exceptions import ModelHTTPError
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from flotilla.agents.core.errors import PermanentError, TransientError
from flotilla.agents.core.failures import classify_error
from flotilla.agents.core.retry_policy import (
    COMMANDER,
    DELIVERY,
    JOB,
    STEP,
    RetryPolicies,
    RetryPolicy,
    retry_after,
)
from flotilla.agents.planning.plan import StepFailed
from flotilla.agents.planning.plan_transitions import apply_outcome, dispatch
from flotilla.bot.settings import Settings
from flotilla.bot.slack_errors import classified
from tests.unit.reconcile_helpers import T0, chain

S = timedelta(seconds=1)


def test_waits_grow_by_the_coefficient_up_to_the_maximum() -> None:
    assert [STEP.delay(n) for n in (1, 2, 3, 4, 5, 6, 20)] == [
        30 * S,
        60 * S,
        120 * S,
        240 * S,
        480 * S,
        600 * S,
        600 * S,
    ]
    assert [JOB.delay(n) for n in (1, 5, 8)] == [15 * S] * 3  # a constant wait
    assert DELIVERY.delay(1) == 2 * S and DELIVERY.delay(10) == timedelta(minutes=5)


def test_a_retry_after_is_honoured_even_above_the_maximum() -> None:
    assert STEP.delay(1, retry_after=90 * S) == 90 * S
    assert STEP.delay(3, retry_after=5 * S) == 120 * S  # shorter than the backoff: backoff
    assert STEP.delay(9, retry_after=timedelta(hours=1)) == timedelta(hours=1)


def test_tries_in_all_count_the_first_and_zero_means_no_limit() -> None:
    assert [STEP.tries_left(n) for n in (1, 2, 3)] == [True, True, False]
    unlimited = RetryPolicy(initial_interval=S)
    assert unlimited.tries_left(10_000)
    assert unlimited.cap == 100 * S  # Temporal's default maximum interval


def test_what_is_never_retried() -> None:
    assert not STEP.retries(PermanentError("no"), 1)
    assert STEP.retries(TransientError("busy"), 1)
    assert not STEP.retries(TransientError("busy"), 3)  # its tries are spent
    picky = RetryPolicy(initial_interval=S, non_retryable=frozenset({"KeyError"}))
    assert not picky.retries(KeyError("x"), 1)
    assert picky.retries(ValueError("x"), 1)


def test_a_policy_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="initial interval"):
        RetryPolicy(initial_interval=timedelta(0))
    with pytest.raises(ValueError, match="coefficient"):
        RetryPolicy(initial_interval=S, backoff_coefficient=0.5)
    with pytest.raises(ValueError, match="maximum attempts"):
        RetryPolicy(initial_interval=S, maximum_attempts=-1)


@settings(max_examples=200, deadline=None)
@given(
    initial=st.floats(min_value=0.001, max_value=3600),
    coefficient=st.floats(min_value=1, max_value=10),
    cap=st.floats(min_value=0.001, max_value=86400),
    failures=st.integers(min_value=1, max_value=200),
    asked=st.none() | st.floats(min_value=0, max_value=7200),
)
def test_every_wait_is_within_its_bounds_and_never_shrinks(
    initial: float, coefficient: float, cap: float, failures: int, asked: float | None
) -> None:
    policy = RetryPolicy(
        initial_interval=timedelta(seconds=initial),
        backoff_coefficient=coefficient,
        maximum_interval=timedelta(seconds=cap),
    )
    after = timedelta(seconds=asked) if asked is not None else None
    wait = policy.delay(failures, after)
    assert wait <= max(policy.cap, after or timedelta(0))
    assert wait >= min(policy.initial_interval, policy.cap)
    assert after is None or wait >= after
    assert policy.delay(failures + 1, after) >= wait


def test_a_providers_retry_after_is_carried_on_the_error() -> None:
    error = classify_error(ModelHTTPError(429, "gpt-4.1", {"error": "slow down"}, retry_after=7))
    assert isinstance(error, TransientError) and retry_after(error) == 7 * S
    plain = classify_error(ModelHTTPError(503, "gpt-4.1", None))
    assert isinstance(plain, TransientError) and retry_after(plain) is None
    assert retry_after(PermanentError("no")) is None


def _slack_error(status: int, headers: dict[str, str]) -> SlackApiError:
    response = AsyncSlackResponse(
        client=AsyncWebClient(token="xoxb-test"),
        http_verb="POST",
        api_url="http://127.0.0.1/api/chat.postMessage",
        req_args={},
        data={"ok": False, "error": "ratelimited"},
        headers=headers,
        status_code=status,
    )
    return SlackApiError("ratelimited", response)  # type: ignore[no-untyped-call]


def test_slacks_retry_after_is_carried_on_the_error() -> None:
    error = classified(_slack_error(429, {"Retry-After": "12"}))
    assert isinstance(error, TransientError) and error.retry_after == 12 * S
    assert isinstance(bad := classified(_slack_error(429, {"retry-after": "soon"})), TransientError)
    assert bad.retry_after is None  # unreadable: the policy's own wait


def test_a_step_waits_as_long_as_its_provider_asked() -> None:
    plan, _ = dispatch(chain(2), T0)
    failed = StepFailed(index=1, attempt=1, reason="429", retryable=True, retry_after_seconds=120)
    plan, effects = apply_outcome(plan, failed, T0)
    assert plan.steps[0].not_before == T0 + 120 * S
    assert [e.available_at for e in effects if e.kind == "retry_due"] == [T0 + 120 * S]


def test_the_step_policy_given_is_the_one_applied() -> None:
    quick = RetryPolicy(initial_interval=5 * S, backoff_coefficient=3, maximum_attempts=9)
    plan, _ = dispatch(chain(2), T0)
    failed = StepFailed(index=1, attempt=1, reason="timeout", retryable=True)
    plan, _ = apply_outcome(plan, failed, T0, quick)
    assert plan.steps[0].not_before == T0 + 5 * S
    assert plan.steps[0].transient_failures == 1


def test_operators_set_the_step_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOTILLA_RETRY_INITIAL_SECONDS", "5")
    monkeypatch.setenv("FLOTILLA_RETRY_BACKOFF_COEFFICIENT", "3")
    monkeypatch.setenv("FLOTILLA_RETRY_MAXIMUM_SECONDS", "60")
    monkeypatch.setenv("FLOTILLA_RETRY_MAXIMUM_ATTEMPTS", "4")
    policies = Settings(_env_file=None).retry_policies()
    assert policies.step == RetryPolicy(
        initial_interval=5 * S,
        backoff_coefficient=3,
        maximum_interval=60 * S,
        maximum_attempts=4,
    )
    assert (policies.job, policies.commander) == (JOB, COMMANDER)  # not settings
    assert RetryPolicies().step == STEP


def test_a_maximum_below_the_first_wait_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOTILLA_RETRY_INITIAL_SECONDS", "60")
    monkeypatch.setenv("FLOTILLA_RETRY_MAXIMUM_SECONDS", "10")
    with pytest.raises(ValidationError, match="FLOTILLA_RETRY_INITIAL_SECONDS"):
        Settings(_env_file=None)
