"""Listeners for the 👍/👎 feedback buttons under answers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond

from flotilla.bot import handlers
from flotilla.bot.listeners.guard import guarded
from flotilla.bot.listeners.inbound import BlockActions, Body, parse
from flotilla.bot.views.feedback import FEEDBACK_ACTIONS

THANKS = "Thanks – your feedback on this answer is noted."
NOT_KEPT = "Sorry, I could not tell which answer this feedback was for; nothing was noted."

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService


def register_feedback(app: AsyncApp, service: SlackService) -> None:
    """A click on an answer's feedback buttons (or on those rating an own-app agent's answer
    under the commander's): kept per plan, step and agent."""

    @app.action(FEEDBACK_ACTIONS)
    @guarded
    async def on_feedback(ack: AsyncAck, body: Body, respond: AsyncRespond) -> None:
        await ack()
        click = parse(BlockActions, body, "a feedback click")
        where = click.where()
        kept = await handlers.record_feedback(
            service,
            value=click.action.button_value(),
            user=where.user,
            channel=where.channel,
            thread_ts=where.thread_ts,
            message_ts=where.message_ts or where.thread_ts,
        )
        text = THANKS if kept else NOT_KEPT
        await respond(text=text, response_type="ephemeral", replace_original=False)
