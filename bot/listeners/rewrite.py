"""An answered form's message rewritten through the click's `response_url`.

A click in a message (an inline answer, a form's [Submit]) carries a `response_url`; a POST
to it with `replace_original` rewrites that message in place – Slack's way to update the
message an interaction came from. It is not a Web API method, so it costs no chat.update
(nor its rate tier). It does not always work: a response_url lasts 30 minutes and 5 uses, a
click replayed from the durable inbox may be older than that, and Slack (or the way to it)
can fail. Then the rewrite says False and the answer's outbox row does it with chat.update
(`agents/delivering/form_answers.py`): the update is never lost, and a failure here is one
info line, not a warning or a traceback. The answer is rendered here (`answer_shown`), as
the answered form's Block Kit (`bot/views/forms.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_bolt.async_app import AsyncBoltContext, AsyncRespond
from slack_sdk.webhook import WebhookResponse

from flotilla.agents.delivering.form_answers import ShowAnswer
from flotilla.agents.planning.plan import Step
from flotilla.bot.listeners.inbound import BlockActions
from flotilla.bot.listeners.inbox import REPLAYED
from flotilla.bot.views.forms import answered_form

log = logging.getLogger(__name__)
RESPOND_SECONDS = 10.0  # then chat.update instead (Bolt's own limit would be 30 s)

Rewrite = Callable[[str, list[dict[str, Any]]], Awaitable[bool]]
"""Rewrites an answered form's own message in place with (text, blocks) – a click's
response_url, chosen by the listener; False when it could not (then chat.update does)."""


def answer_shown(
    click: BlockActions, respond: AsyncRespond | None, context: AsyncBoltContext
) -> ShowAnswer | None:
    """How to show a form's answer in the clicked message: rendered, then rewritten through
    the click's response_url (`through_response_url`); None when there is none to use."""
    rewrite = through_response_url(click, respond, context)
    if rewrite is None:
        return None

    async def show(step: Step, values: dict[str, str], answered_by: str) -> bool:
        text, blocks = answered_form(step, values, answered_by)
        return await rewrite(text, [b.to_dict() for b in blocks])

    return show


def through_response_url(
    click: BlockActions, respond: AsyncRespond | None, context: AsyncBoltContext
) -> Rewrite | None:
    """How to rewrite the clicked message through the click's response_url; None when it
    has none, or when the click is replayed from the inbox (its url may have expired)."""
    if respond is None or click.response_url is None or context.get(REPLAYED) is not None:
        return None

    async def rewrite(text: str, blocks: list[dict[str, Any]]) -> bool:
        try:
            async with asyncio.timeout(RESPOND_SECONDS):
                response = await respond(text=text, blocks=blocks, replace_original=True)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return _not_rewritten(f"{type(exc).__name__}: {exc}")
        refused = refusal_of(response)
        return True if refused is None else _not_rewritten(refused)

    return rewrite


def refusal_of(response: WebhookResponse) -> str | None:
    """Why a response_url refused a message (None when it took it): an HTTP error such as
    Slack's 404 `expired_url` / `used_url`, or a body saying `"ok": false`."""
    body = (response.body or "").strip()
    if response.status_code != 200:
        return f"HTTP {response.status_code} {body[:80]}".rstrip()
    try:
        answer = json.loads(body) if body.startswith("{") else None
    except ValueError:
        answer = None
    if isinstance(answer, dict) and answer.get("ok") is False:
        return str(answer.get("error") or "refused")[:80]
    return None


def _not_rewritten(why: str) -> bool:
    log.info("the answered form was not rewritten through its response_url (%s); chat.update", why)
    return False
