"""The Bolt app: listeners ack at once, parse, and hand the work to `bot/handlers.py`.

Bolt (async, `process_before_response=False`) acknowledges events before it runs their
listeners; interactive listeners call `ack()` first thing. Long work runs as jobs.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from agents.plan import FormSpec
from bot import handlers
from bot.listeners.admin import register_admin
from bot.service import Flotilla
from bot.views.forms import (
    INLINE_ACTION,
    MODAL_CALLBACK,
    OPEN_ACTION,
    FormKey,
    form_modal,
    inline_value,
    modal_values,
)
from bot.views.plan_card import CANCEL_ACTION

log = logging.getLogger(__name__)
Body = dict[str, Any]


def build_app(service: Flotilla, *, signing_secret: str | None) -> AsyncApp:
    """The commander's Bolt app, wired to `service`."""
    app = AsyncApp(
        client=service.client,
        signing_secret=signing_secret,
        request_verification_enabled=signing_secret is not None,
        process_before_response=False,
    )

    # Event work runs as a job, registered before the listener's first await, so that
    # `Flotilla.settle()` sees it as soon as the event was acknowledged.
    @app.event("app_mention")
    async def on_mention(event: Body, body: Body) -> None:
        service.events.start(lambda: handlers.on_mention(service, event, body.get("event_id")))

    @app.event("message")
    async def on_message(event: Body, body: Body) -> None:
        service.events.start(lambda: handlers.on_message(service, event))

    @app.action(INLINE_ACTION)
    async def on_inline_answer(
        ack: AsyncAck, body: Body, action: Body, respond: AsyncRespond
    ) -> None:
        await ack()
        value = inline_value(action)
        if not value:
            await respond(text="Please type an answer first.", response_type="ephemeral",
                          replace_original=False)  # fmt: skip
            return
        key = FormKey.decode(action["block_id"])
        field_name = await _single_field(service, body, key)
        refusal = await handlers.answer_form(
            service, key=key, values={field_name: value}, **_where(body)
        )
        if refusal:
            await respond(text=refusal, response_type="ephemeral", replace_original=False)

    @app.action(OPEN_ACTION)
    async def on_open_form(ack: AsyncAck, body: Body, action: Body, client: AsyncWebClient) -> None:
        await ack()
        key = FormKey.decode(action["value"])
        where = _where(body)
        title, question, form = await _form_of(service, where["channel"], where["thread_ts"], key)
        view = form_modal(key, title=title, question=question, form=form, metadata=where)
        await client.views_open(trigger_id=body["trigger_id"], view=view)

    @app.view(MODAL_CALLBACK)
    async def on_form_submit(ack: AsyncAck, body: Body, view: Body, client: AsyncWebClient) -> None:
        metadata = json.loads(view.get("private_metadata") or "{}")
        key = FormKey.decode(metadata["key"])
        _title, _question, form = await _form_of(
            service, metadata["channel"], metadata["thread_ts"], key
        )
        values, errors = modal_values(view.get("state") or {}, form)
        if errors:
            await ack(response_action="errors", errors=errors)
            return
        await ack()
        user = body["user"]["id"]
        refusal = await handlers.answer_form(
            service,
            key=key,
            values=values,
            user=user,
            channel=metadata["channel"],
            thread_ts=metadata["thread_ts"],
            message_ts=metadata.get("message_ts"),
        )
        if refusal:
            await client.chat_postEphemeral(
                channel=metadata["channel"], user=user, text=refusal,
                thread_ts=metadata["thread_ts"],
            )  # fmt: skip

    @app.action(CANCEL_ACTION)
    async def on_cancel(ack: AsyncAck, body: Body, action: Body, respond: AsyncRespond) -> None:
        await ack()
        where = _where(body)
        refusal = await handlers.cancel_plan(
            service,
            plan_id=int(action["value"]),
            user=where["user"],
            channel=where["channel"],
            thread_ts=where["thread_ts"],
        )
        if refusal:
            await respond(text=refusal, response_type="ephemeral", replace_original=False)

    register_admin(app, service)
    return app


def _where(body: Body) -> dict[str, Any]:
    """Who acted, and on which message of which thread (from a block_actions payload)."""
    container = body.get("container") or {}
    message = body.get("message") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id")
    message_ts = container.get("message_ts") or message.get("ts")
    thread_ts = container.get("thread_ts") or message.get("thread_ts") or message_ts
    return {
        "user": body["user"]["id"],
        "channel": channel,
        "thread_ts": thread_ts,
        "message_ts": message_ts,
    }


async def _form_of(
    service: Flotilla, channel: str, thread_ts: str, key: FormKey
) -> tuple[str, str, FormSpec | None]:
    """The title, question and fields of the form a key names (as stored in the plan)."""
    conversation = await service.find_conversation(channel, thread_ts)
    plan = await service.reconciler.plan(conversation.id) if conversation else None
    step = plan.step(key.step_index) if plan is not None else None
    if step is None:
        return "", "", None
    if step.question is not None and step.assignee != "user":
        return step.title, step.question.text, step.question.form
    return step.title, step.input or step.title, step.form


async def _single_field(service: Flotilla, body: Body, key: FormKey) -> str:
    where = _where(body)
    _title, _question, form = await _form_of(service, where["channel"], where["thread_ts"], key)
    return form.fields[0].name if form and form.fields else "answer"
