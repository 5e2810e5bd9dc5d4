"""Listeners for forms: an inline answer (one field), the [Submit] of a small form answered
in its message, the button that opens a larger form's modal, and the modal's submit.

An answer clicked in the form's own message rewrites that message through the click's
response_url (`bot/listeners/rewrite.py`: no Web API call); for the modal's submission, a
replayed click and a refused response_url the stored answer's outbox row does it with
chat.update.

Whether a form is open and who may answer it, the answer's store, its record in the plan and
its showing are `agents/delivering/form_answers.py`'s (rules in `agents/planning/form_rules.py`):
a listener reads the form's thread once, calls `answer_form` (or `form_refusal`) with what
the service gives it (`_desk`), and tells the person the sentence it returns, if any.

Each payload is parsed into its typed model first (`bot/listeners/inbound.py`); one that does
not fit is answered by the guard with a sentence, and nothing from it reaches the handlers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncBoltContext, AsyncRespond
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.agents.delivering.form_answers import (
    FormDesk,
    FormThread,
    answer_form,
    form_refusal,
)
from flotilla.bot.handlers import received_file
from flotilla.bot.listeners.guard import INBOX_DONE, answer, guarded
from flotilla.bot.listeners.inbound import (
    BlockActions,
    Body,
    FormMetadata,
    InboundFile,
    InvalidPayload,
    ViewSubmission,
    form_key,
    metadata_of,
    parse,
)
from flotilla.bot.listeners.rewrite import answer_shown
from flotilla.bot.views.forms import (
    INLINE_ACTION,
    MODAL_CALLBACK,
    OPEN_ACTION,
    SUBMIT_ACTION,
    form_modal,
    inline_value,
    missing_sentence,
    modal_files,
    modal_values,
)

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService


def register_forms(app: AsyncApp, service: SlackService) -> None:
    """Form answers (in the form's message, and in a modal)."""

    @app.action(INLINE_ACTION)
    @guarded
    async def on_inline_answer(
        ack: AsyncAck, body: Body, respond: AsyncRespond, context: AsyncBoltContext
    ) -> None:
        await ack()
        click = parse(BlockActions, body, "a form answer")
        where, key = click.where(), form_key(click.action.block_id)
        value = inline_value(click.action.model_dump())
        if not value:
            await answer(ack, body, respond, "Please type an answer first.")
            return
        thread = await _thread(service, where.channel, where.thread_ts)
        _title, _question, form = thread.form(key)
        field_name = form.fields[0].name if form and form.fields else "answer"
        refusal = await answer_form(
            _desk(service),
            thread,
            key,
            values={field_name: value},
            user=where.user,
            message_ts=where.message_ts,
            show=answer_shown(click, respond, context),
            inbox=context.get(INBOX_DONE),
        )
        if refusal:  # only to the person, through the click's response_url (never raises)
            await answer(ack, body, respond, refusal)

    @app.action(SUBMIT_ACTION)
    @guarded
    async def on_message_submit(
        ack: AsyncAck, body: Body, respond: AsyncRespond, context: AsyncBoltContext
    ) -> None:
        """A form answered in its message: [Submit] carries every input in `state.values`.
        Checked as a modal's submission is; what is missing is told in a sentence, only to
        the person (the form stays open with what they typed)."""
        await ack()
        click = parse(BlockActions, body, "a form's Submit")
        where, key = click.where(), form_key(click.action.button_value())
        thread = await _thread(service, where.channel, where.thread_ts)
        _title, _question, form = thread.form(key)
        values, errors = modal_values(click.state, form)
        if errors:  # a form closed meanwhile (a stale copy, a second click) says so first
            refusal = await form_refusal(_desk(service), thread, key, user=where.user)
            refusal = refusal or missing_sentence(errors)
        else:
            refusal = await answer_form(
                _desk(service),
                thread,
                key,
                values=values,
                user=where.user,
                message_ts=where.message_ts,
                show=answer_shown(click, respond, context),
                inbox=context.get(INBOX_DONE),
            )
        if refusal:  # only to the person, through the click's response_url (never raises)
            await answer(ack, body, respond, refusal)

    @app.action(OPEN_ACTION)
    @guarded
    async def on_open_form(ack: AsyncAck, body: Body, client: AsyncWebClient) -> None:
        await ack()
        click = parse(BlockActions, body, "an Answer click")
        where, key = click.where(), form_key(click.action.button_value())
        if click.trigger_id is None:
            raise InvalidPayload("an Answer click", "trigger_id: missing")
        thread = await _thread(service, where.channel, where.thread_ts)
        title, question, form = thread.form(key)
        view = form_modal(
            key,
            title=title,
            question=question,
            form=form,
            metadata=where.model_dump(exclude={"user"}),
        )
        await client.views_open(trigger_id=click.trigger_id, view=view)

    @app.view(MODAL_CALLBACK)
    @guarded
    async def on_form_submit(
        ack: AsyncAck, body: Body, client: AsyncWebClient, context: AsyncBoltContext
    ) -> None:
        submission = parse(ViewSubmission, body, "a form submission")
        metadata = metadata_of(submission.view, FormMetadata)
        key = form_key(metadata.key)
        thread = await _thread(service, metadata.channel, metadata.thread_ts)
        _title, _question, form = thread.form(key)
        values, errors = modal_values(submission.view.state, form)
        files = [
            parse(InboundFile, f, "a form's attachment")
            for f in modal_files(submission.view.state, form)
        ]
        if errors:
            await ack(response_action="errors", errors=errors)
            return
        await ack()
        user = submission.user.id
        refusal = await answer_form(
            _desk(service),
            thread,
            key,
            values=values,
            user=user,
            message_ts=metadata.message_ts,
            files=[received_file(f, service.options.files) for f in files],
            inbox=context.get(INBOX_DONE),
        )
        if refusal:
            await client.chat_postEphemeral(
                channel=metadata.channel, user=user, text=refusal, thread_ts=metadata.thread_ts
            )


async def _thread(service: SlackService, channel: str, thread_ts: str) -> FormThread:
    """The form's thread: its conversation and newest plan, in one read."""
    conversation, plan = await service.find_plan(channel, thread_ts)
    return FormThread(conversation, plan)


def _desk(service: SlackService) -> FormDesk:
    """What answering a form needs of the service."""
    return FormDesk(
        db=service.db,
        clock=service.clock,
        reconciler=service.reconciler,
        sender=service.executor.outbox,
        answerers=service.options.form_answerers,
        is_admin=service.is_admin,
        enabled_names=service.enabled_names,
        say=service.say,
        start=service.events.start,
        wake=service.wake,
    )
