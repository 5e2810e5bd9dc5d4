"""An answered form rewritten through a click's response_url: what counts as refused, and a
failure on the way (Slack unreachable, an error answer) is an info line and False – the
handler then uses chat.update."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest
from slack_bolt.async_app import AsyncBoltContext
from slack_sdk.webhook import WebhookResponse

from flotilla.bot.listeners.inbound import BlockActions
from flotilla.bot.listeners.inbox import REPLAYED
from flotilla.bot.listeners.rewrite import refusal_of, through_response_url

URL = "https://hooks.slack.com/actions/T1/1/abc"
CLICK = {
    "type": "block_actions",
    "user": {"id": "U0123ABC"},
    "response_url": URL,
    "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C0123ABC"},
    "actions": [{"action_id": "a", "block_id": "b", "type": "button"}],
}


def answer(status: int, body: str) -> WebhookResponse:
    return WebhookResponse(url=URL, status_code=status, body=body, headers={})


class FakeRespond:
    def __init__(self, outcome: WebhookResponse | Exception) -> None:
        self.outcome = outcome
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, **kwargs: Any) -> WebhookResponse:
        self.calls.append(kwargs)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def test_what_a_response_url_refused() -> None:
    assert refusal_of(answer(200, '{"ok":true}')) is None
    assert refusal_of(answer(200, "ok")) is None
    assert refusal_of(answer(404, "expired_url")) == "HTTP 404 expired_url"
    assert refusal_of(answer(500, "")) == "HTTP 500"
    assert refusal_of(answer(200, '{"ok":false,"error":"used_url"}')) == "used_url"


@pytest.mark.parametrize(
    ("outcome", "rewritten"),
    [
        (answer(200, '{"ok":true}'), True),
        (answer(404, '{"ok":false,"error":"expired_url"}'), False),
        (aiohttp.ClientConnectionError("connection refused"), False),
        (TimeoutError(), False),
    ],
)
async def test_a_rewrite_says_whether_it_worked_and_never_raises(
    outcome: WebhookResponse | Exception, rewritten: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flotilla.bot")
    respond = FakeRespond(outcome)
    rewrite = through_response_url(BlockActions.model_validate(CLICK), respond, AsyncBoltContext())  # type: ignore[arg-type]
    assert rewrite is not None
    assert await rewrite("✅ Answered", [{"type": "section"}]) is rewritten
    assert respond.calls == [
        {"text": "✅ Answered", "blocks": [{"type": "section"}], "replace_original": True}
    ]
    assert all(r.levelno == logging.INFO and not r.exc_info for r in caplog.records)
    assert len(caplog.records) == (0 if rewritten else 1)


def test_no_rewrite_without_a_response_url_or_for_a_replayed_click() -> None:
    respond = FakeRespond(answer(200, "ok"))
    bare = BlockActions.model_validate({k: v for k, v in CLICK.items() if k != "response_url"})
    assert through_response_url(bare, respond, AsyncBoltContext()) is None  # type: ignore[arg-type]
    replayed = AsyncBoltContext({REPLAYED: 7})
    click = BlockActions.model_validate(CLICK)
    assert through_response_url(click, respond, replayed) is None  # type: ignore[arg-type]
