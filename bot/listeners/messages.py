"""Listeners for messages: mentions of the commander and replies in its threads.

Bolt acknowledges events before it runs their listeners; the work runs as a tracked task,
registered before the listener's first await, so `Flotilla.settle()` sees it at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slack_bolt.async_app import AsyncApp

from bot import handlers

if TYPE_CHECKING:
    from bot.service import Flotilla

Body = dict[str, Any]


def register_messages(app: AsyncApp, service: Flotilla) -> None:
    """`app_mention` and `message` events."""

    @app.event("app_mention")
    async def on_mention(event: Body, body: Body) -> None:
        service.events.start(lambda: handlers.on_mention(service, event, body.get("event_id")))

    @app.event("message")
    async def on_message(event: Body, body: Body) -> None:
        service.events.start(lambda: handlers.on_message(service, event))
