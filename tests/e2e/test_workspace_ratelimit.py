"""Rate limits: off by default; when on, HTTP 429 with Retry-After per method tier and for
chat.postMessage per channel, as slack_sdk sees them."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError

from flotilla.local_slack import LocalWorkspace
from flotilla.local_slack.ratelimit import TIER_PER_MINUTE, RateLimiter
from tests.e2e.conftest import client_for
from tests.fakes.clock import FakeClock


async def test_rate_limits_are_off_by_default(workspace: LocalWorkspace) -> None:
    app = workspace.install_app("Busy", scopes=["chat:write"])
    channel = workspace.create_channel("general", [app])
    client = client_for(workspace, app.bot_token)
    for i in range(20):
        await client.chat_postMessage(channel=channel.id, text=str(i))
    assert workspace.rate_limiter.limited == []


async def test_post_message_is_limited_per_channel_with_retry_after(
    workspace: LocalWorkspace,
) -> None:
    workspace.rate_limiter.enabled = True
    workspace.rate_limiter.channel_burst = 2
    app = workspace.install_app("Busy", scopes=["chat:write"])
    one = workspace.create_channel("one", [app])
    two = workspace.create_channel("two", [app])
    client = client_for(workspace, app.bot_token)  # no retry handler: the 429 surfaces
    await client.chat_postMessage(channel=one.id, text="a")
    await client.chat_postMessage(channel=one.id, text="b")
    with pytest.raises(SlackApiError) as info:
        await client.chat_postMessage(channel=one.id, text="c")
    resp = info.value.response
    assert resp.status_code == 429 and resp.data == {"ok": False, "error": "ratelimited"}
    assert int(resp.headers["Retry-After"]) >= 1
    # Another channel has its own allowance.
    assert (await client.chat_postMessage(channel=two.id, text="d"))["ok"]


def test_method_tiers_allow_a_minute_of_calls_then_refill() -> None:
    clock = FakeClock()
    limiter = RateLimiter(enabled=True, clock=clock.monotonic)
    allowed = 0
    while limiter.retry_after("chat.update", "A1", None) is None:
        allowed += 1
    assert allowed == TIER_PER_MINUTE["t3"]
    assert limiter.retry_after("chat.update", "A2", None) is None  # per app
    assert limiter.retry_after("views.open", "A1", None) is None  # per method
    clock.advance(60 / TIER_PER_MINUTE["t3"])
    assert limiter.retry_after("chat.update", "A1", None) is None
    assert limiter.retry_after("chat.update", "A1", None) is not None


def test_post_message_refills_about_one_per_second_per_channel() -> None:
    clock = FakeClock()
    limiter = RateLimiter(enabled=True, channel_burst=1, clock=clock.monotonic)
    assert limiter.retry_after("chat.postMessage", "A1", "C1") is None
    assert limiter.retry_after("chat.postMessage", "A1", "C1") == 1
    clock.advance(1.0)
    assert limiter.retry_after("chat.postMessage", "A1", "C1") is None
