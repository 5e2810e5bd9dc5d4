"""Listeners for the plan card: its Cancel button."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from bot import handlers
from bot.listeners.where import Body, where_of
from bot.views.plan_card import CANCEL_ACTION

if TYPE_CHECKING:
    from bot.service import SlackService


def register_plan_card(app: AsyncApp, service: SlackService) -> None:
    """The card's Cancel button (requester or admin)."""

    @app.action(CANCEL_ACTION)
    async def on_cancel(ack: AsyncAck, body: Body, action: Body, respond: AsyncRespond) -> None:
        await ack()
        where = where_of(body)
        refusal = await handlers.cancel_plan(
            service,
            plan_id=int(action["value"]),
            user=where["user"],
            channel=where["channel"],
            thread_ts=where["thread_ts"],
        )
        if refusal:
            await respond(text=refusal, response_type="ephemeral", replace_original=False)
