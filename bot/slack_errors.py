"""Slack's Web API errors as the port's: `TransientError` (try again) or `PostingRefused`
(a sentence a person can act on)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import aiohttp
from slack_sdk.errors import SlackApiError

from flotilla.agents.core.errors import TransientError
from flotilla.agents.reconciling.ports import PostingRefused

# Slack errors worth another try (besides HTTP 429/5xx, which the client retries first)
TRANSIENT_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable"}
)
REFUSALS = {
    "not_in_channel": "I am not in this channel any more (invite me back with /invite)",
    "channel_not_found": "this channel no longer exists or I cannot see it",
    "is_archived": "this channel is archived",
    "thread_not_found": "the thread is gone",
    "restricted_action": "posting here is restricted by the workspace's settings",
    "msg_too_long": "the message was too long for Slack",
}


@contextmanager
def slack_call(app: str | None = None) -> Iterator[None]:
    """Slack's errors as the port's: `TransientError` (try again) or `PostingRefused`.
    `app`: the agent's own Slack app that called (its refusals name it, not Flotilla)."""
    try:
        yield
    except SlackApiError as exc:
        raise classified(exc, app) from exc
    except (aiohttp.ClientError, TimeoutError) as exc:  # not reached, or no answer in time
        raise TransientError(f"Slack could not be reached ({type(exc).__name__})") from exc


def _retry_after(exc: SlackApiError) -> timedelta | None:
    """The wait Slack asked for with a 429 (its `Retry-After` header, in seconds)."""
    headers = exc.response.headers if exc.response is not None else {}
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if isinstance(value, list):  # slack_sdk keeps each header's values as a list
        value = value[0] if value else None
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return timedelta(seconds=seconds) if seconds is not None and 0 <= seconds <= 3600 else None


def classified(exc: SlackApiError, app: str | None = None) -> Exception:
    """Slack's error as `TransientError` (try again) or `PostingRefused` (a sentence)."""
    status = exc.response.status_code if exc.response is not None else 0
    error = str(exc.response.get("error", "")) if exc.response is not None else ""
    if status == 429 or status >= 500 or error in TRANSIENT_ERRORS:
        return TransientError(f"Slack answered {error or status}", retry_after=_retry_after(exc))
    if app is not None and error == "not_in_channel":
        return PostingRefused(f"the {app} app is not in this channel (invite it with /invite)")
    sentence = REFUSALS.get(error, f"Slack refused the message ({error or status})")
    return PostingRefused(sentence)
