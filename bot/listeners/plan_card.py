"""Listeners for the plan card: its Cancel button."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from flotilla.bot import handlers
from flotilla.bot.listeners.guard import guarded
from flotilla.bot.listeners.inbound import BlockActions, Body, parse, plan_number
from flotilla.bot.views.plan_card import CANCEL_ACTION

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService


def register_plan_card(app: AsyncApp, service: SlackService) -> None:
    """The card's Cancel button (requester or admin)."""

    @app.action(CANCEL_ACTION)
    @guarded
    async def on_cancel(ack: AsyncAck, body: Body, respond: AsyncRespond) -> None:
        await ack()
        click = parse(BlockActions, body, "a Cancel click")
        where, plan_id = click.where(), plan_number(click.action.button_value())
        refusal = await handlers.cancel_plan(
            service,
            plan_id=plan_id,
            user=where.user,
            channel=where.channel,
            thread_ts=where.thread_ts,
        )
        if refusal:
            await respond(text=refusal, response_type="ephemeral", replace_original=False)
