"""Every interactive listener answers: a payload that does not fit is acked with a sentence
and one log line; a failure after the ack is logged once with its traceback and the person
gets "Something went wrong…" ephemerally (a database outage or an unreachable Slack is one
warning line, without a traceback; for an outage the person reads the storage sentence).
Nothing escapes to Bolt, whose own error path answers the request with a 404 or a 500 (and
can lose the ack it already had).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from pydantic import TypeAdapter, ValidationError
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from flotilla.agents.core.failures import PUBLIC_STORAGE, is_storage_error, storage_error
from flotilla.bot.listeners.inbound import InvalidPayload, Url

log = logging.getLogger(__name__)
TRY_AGAIN = "Something went wrong on my side – please try again."
UNREADABLE = "I could not read that request; nothing was changed."
# what the guard itself needs from Bolt, whatever the listener asks for
_NEEDS = ("ack", "body", "respond", "context")
_URL: TypeAdapter[str] = TypeAdapter(Url)
Listener = Callable[..., Awaitable[None]]
INBOX_DONE = "flotilla_inbox_done"  # set by the inbox middleware (bot/listeners/inbox.py)


def sentence_view(text: str) -> dict[str, Any]:
    """A modal that says one sentence (the answer to a submission that cannot be taken)."""
    return {
        "type": "modal",
        "title": {"type": "plain_text", "text": "Flotilla"},
        "close": {"type": "plain_text", "text": "Close"},
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
    }


def guarded(listener: Listener) -> Listener:
    """`listener`, answering for it when it refuses a payload or fails (see the module)."""
    signature = inspect.signature(listener)
    own = list(signature.parameters)
    name = getattr(listener, "__qualname__", "listener")

    async def answering(**kwargs: Any) -> None:
        try:
            await listener(**{k: v for k, v in kwargs.items() if k in own})
        except InvalidPayload as exc:
            log.warning("%s (%s)", exc, name)
            await answer(kwargs["ack"], kwargs["body"], kwargs["respond"], UNREADABLE)
        except Exception as exc:  # the operator gets the details once, the person a sentence
            text = TRY_AGAIN
            if is_storage_error(exc):  # an outage: one line, and the storage sentence
                log.warning("%s: %s", name, storage_error(exc))
                text = PUBLIC_STORAGE
            elif isinstance(exc, aiohttp.ClientError):  # Slack (or its response_url) unreachable
                log.warning("%s could not reach Slack: %s", name, exc)
            else:
                log.exception("%s failed", name)
            await answer(kwargs["ack"], kwargs["body"], kwargs["respond"], text)
        done = kwargs["context"].get(INBOX_DONE)
        if done is not None:  # its stored inbox row: processed (see listeners/inbox.py)
            await done()

    extra = [
        inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        for n in _NEEDS
        if n not in own
    ]
    # Bolt passes the arguments a listener names (read from its signature)
    answering.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), *extra]
    )
    answering.__name__ = answering.__qualname__ = name
    return answering


async def answer(ack: AsyncAck, body: dict[str, Any], respond: AsyncRespond, text: str) -> None:
    """Say `text` to whoever sent `body`: in the ack when it is still due, else through the
    response_url (only one that has Slack's shape); never raises."""
    try:
        if ack.response is None:
            if body.get("type") == "view_submission":
                await ack(response_action="update", view=sentence_view(text))
                return
            if "command" in body:
                await ack(text=text, response_type="ephemeral")
                return
            await ack()
        if respond is not None and _valid_url(body.get("response_url")):
            await respond(text=text, response_type="ephemeral", replace_original=False)
    except Exception as exc:  # the answer itself failed: the log says so, nothing else can
        log.warning("could not answer an interaction: %s", exc)


def _valid_url(value: Any) -> bool:
    try:
        _URL.validate_python(value)
    except ValidationError:
        return False
    return True


def register_fallbacks(app: AsyncApp) -> None:
    """Clicks and submissions no listener of Flotilla's claims (an action or a view it did
    not make): acked with nothing and one log line, never Bolt's unhandled-request 404.
    Registered last – Bolt runs the first listener that matches."""

    @app.action(re.compile(".*"))
    async def unknown_action(ack: AsyncAck, action: dict[str, Any]) -> None:
        await ack()
        log.info(
            "ignored a click on an action Flotilla does not know (%.80r)", action.get("action_id")
        )

    @app.view(re.compile(".*"))
    async def unknown_view(ack: AsyncAck, view: dict[str, Any]) -> None:
        await ack()
        log.info(
            "ignored a submission of a view Flotilla did not open (%.80r)", view.get("callback_id")
        )
