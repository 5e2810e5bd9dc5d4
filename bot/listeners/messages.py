"""Listeners for messages: mentions of the commander and replies in its threads.

A message Flotilla will act on is recorded *before* the HTTP ack (a global middleware runs
before Bolt answers Slack): the message, its conversation and its commander turn are
stored in one transaction, so a crash or a database hiccup after the ack can lose nothing.
When it cannot be stored, Slack gets a 500 and delivers the event again (de-duplicated by
the message's channel and ts). The same holds in Socket Mode, where the ack is sent after
dispatch too. An event Flotilla reads that does not fit its typed model
(`bot/listeners/inbound.py`) gets a 400 and one log line, and nothing of it is stored.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from slack_bolt.async_app import AsyncApp
from slack_bolt.response import BoltResponse

from flotilla.agents.core.failures import is_storage_error, storage_error
from flotilla.agents.reconciling.inbox import retry_storage
from flotilla.bot import handlers
from flotilla.bot.listeners.inbound import RECORDED_EVENTS, InvalidPayload, check_event

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService

log = logging.getLogger(__name__)
Body = dict[str, Any]


def register_messages(app: AsyncApp, service: SlackService) -> None:
    """`app_mention` and `message` events, recorded before the ack."""

    @app.middleware
    async def record_before_ack(
        body: Body, next: Callable[[], Awaitable[None]]
    ) -> BoltResponse | None:
        try:
            kind = check_event(body)
        except InvalidPayload as exc:  # nothing from it is stored or answered
            log.warning("%s", exc)
            return BoltResponse(status=400, body={"error": "invalid event"})
        event = body.get("event")
        if isinstance(event, dict) and kind in RECORDED_EVENTS:
            try:  # retried briefly while the database is busy (a burst on SQLite)
                if event["type"] == "app_mention":
                    await retry_storage(
                        lambda: handlers.on_mention(service, event, body.get("event_id"))
                    )
                else:
                    await retry_storage(lambda: handlers.on_message(service, event))
            except Exception as exc:
                if not is_storage_error(exc):
                    log.exception(
                        "could not record a %s event; Slack will send it again", event["type"]
                    )
                else:  # an outage: one line, not a traceback per delivery
                    log.warning(
                        "could not record a %s event; Slack will send it again: %s",
                        event["type"],
                        storage_error(exc),
                    )
                return BoltResponse(status=500, body={"error": "not stored, please retry"})
        await next()
        return None

    @app.event("app_mention")
    async def on_mention() -> None:
        """Recorded before the ack (`record_before_ack`); nothing is left to do."""

    @app.event("message")
    async def on_message() -> None:
        """Recorded before the ack (`record_before_ack`); nothing is left to do."""
