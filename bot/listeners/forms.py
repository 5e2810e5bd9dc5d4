"""Listeners for forms: an inline answer, the button that opens a form's modal, its submit."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from agents.plan import FormSpec
from bot import handlers
from bot.listeners.where import Body, where_of
from bot.views.forms import (
    INLINE_ACTION,
    MODAL_CALLBACK,
    OPEN_ACTION,
    FormKey,
    form_modal,
    inline_value,
    modal_values,
)

if TYPE_CHECKING:
    from bot.service import SlackService


def register_forms(app: AsyncApp, service: SlackService) -> None:
    """Form answers (inline and in a modal)."""

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
            service, key=key, values={field_name: value}, **where_of(body)
        )
        if refusal:
            await respond(text=refusal, response_type="ephemeral", replace_original=False)

    @app.action(OPEN_ACTION)
    async def on_open_form(ack: AsyncAck, body: Body, action: Body, client: AsyncWebClient) -> None:
        await ack()
        key = FormKey.decode(action["value"])
        where = where_of(body)
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


async def _form_of(
    service: SlackService, channel: str, thread_ts: str, key: FormKey
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


async def _single_field(service: SlackService, body: Body, key: FormKey) -> str:
    where = where_of(body)
    _title, _question, form = await _form_of(service, where["channel"], where["thread_ts"], key)
    return form.fields[0].name if form and form.fields else "answer"
