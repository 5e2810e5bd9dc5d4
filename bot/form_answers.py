"""A form's answer, once the listener acked it: who may, stored, recorded, shown.

An answer is stored first, as the form's outbox row (`agents/delivering/form_answers.py`: one per
form, the first stored wins, and its delivery records the answer and rewrites the form's
message – at least once, whatever happens to this process). Then, at once, the click
records it (a reconcile) and rewrites the form's message through `rewrite` – the click's
response_url, no Web API call (`bot/listeners/rewrite.py`) – and the row is marked
delivered. The row waits `REWRITE_GRACE` before any sender takes it, so a live click's own
rewrite comes first; with no rewrite to try (a modal's submission, a click replayed from
the inbox) or when it fails, the row is made due at once and the executor's chat.update
shows the answer.

Every later click on the form finds the stored answer: a replay or a double click of the
same answer is taken silently, and the form shown with it if it is not yet; a click with
another answer (a second person, or second thoughts) is told who answered, and the form is
shown with the stored answer – never with the later click's values.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from flotilla.agents.delivering import form_answers
from flotilla.agents.delivering.form_answers import StoredAnswer
from flotilla.agents.planning.effects import FormAnswer, form_answer_key
from flotilla.agents.planning.plan import USER, FormSpec, Plan, Step
from flotilla.agents.reconciling.inbox import InboxFinish, Incoming, record_attachments
from flotilla.agents.running.step_runs import ids
from flotilla.bot.handlers import received_file, refused_note
from flotilla.bot.listeners.payloads import SlackFile
from flotilla.bot.views.forms import FormKey, answered_form

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService
    from flotilla.storage.files import ReceivedFile
    from flotilla.storage.records import ConversationRecord

log = logging.getLogger(__name__)

Rewrite = Callable[[str, list[dict[str, Any]]], Awaitable[bool]]
"""Rewrites an answered form's own message in place with (text, blocks) – a click's
response_url, chosen by the listener; False when it could not (then chat.update does)."""


@dataclass(frozen=True, slots=True)
class FormThread:
    """A form's thread as read once for a click or a submission: its conversation and its
    newest plan (None when there is none). The listener reads it to know the form's fields;
    the answer is then checked against the same read (`answer_form`, `form_refusal`)."""

    conversation: ConversationRecord | None
    plan: Plan | None

    def step(self, key: FormKey) -> Step | None:
        """The step of the form `key` in the plan read (any plan: see `_form_step`)."""
        return self.plan.step(key.step_index) if self.plan is not None else None

    def form(self, key: FormKey) -> tuple[str, str, FormSpec | None]:
        """The title, question and fields of the form `key` names (as stored in the plan)."""
        step = self.step(key)
        if step is None:
            return "", "", None
        if step.question is not None and step.assignee != USER:
            return step.title, step.question.text, step.question.form
        return step.title, step.input or step.title, step.form


async def form_thread(service: SlackService, channel: str, thread_ts: str) -> FormThread:
    """The thread's conversation and newest plan, in one read."""
    conversation, plan = await service.find_plan(channel, thread_ts)
    return FormThread(conversation, plan)


# how long a stored answer waits for its click's own rewrite before any process's outbox
# sender shows it with chat.update (the response_url is given 10 s, the reconcile the rest)
REWRITE_GRACE = timedelta(seconds=60)


async def answer_form(
    service: SlackService,
    *,
    key: FormKey,
    values: dict[str, str],
    user: str,
    channel: str,
    thread_ts: str,
    message_ts: str | None,
    files: Sequence[SlackFile] = (),
    rewrite: Rewrite | None = None,
    thread: FormThread | None = None,
    inbox: InboxFinish | None = None,
) -> str | None:
    """Store, record and show a form's answer (and keep the files attached to it). Returns a
    refusal sentence, or None when this answer is the form's (also when it was already:
    a replay, a double click). `thread`: the form's thread as just read (else read here);
    `inbox`: the click's stored request, finished with the answer's store when that is all
    a crash could lose (no files: the answer's outbox row records and shows it). See the
    module."""
    thread = thread or await form_thread(service, channel, thread_ts)
    found = await _form_step(service, thread, key=key, user=user)
    if isinstance(found, str):
        return found
    conversation, step_read = found
    step: Step | None = step_read
    now = service.clock()
    given = form_answers.form_answer(
        conversation.id,
        plan_id=key.plan_id,
        step=key.step_index,
        attempt=key.attempt,
        round=key.round,
        values=values,
        answered_by=user,
        event_key=f"{key.encode()}:answered",
        message_ts=message_ts,
        available_at=now + REWRITE_GRACE if rewrite is not None else None,
    )
    open_now = is_open(step_read, key)
    stored = await _stored(service, given, open_now, inbox if not files else None)
    if stored is None:  # closed without an answer stored (cancelled; or answered long ago)
        return _closed(step)
    answer = stored.answer
    same = form_answers.same(answer, given)
    recorded_now = False  # by this click (not a replay, a double click, the executor)
    where = message_ts or key.encode()
    kept: tuple[ReceivedFile, ...] | None = None
    if same and open_now:
        if files:  # kept before the answer is recorded: the step it starts finds them
            kept = await _keep_files(service, conversation, where, files)
        decision = await form_answers.record(
            service.reconciler, answer, await service.enabled_names()
        )
        step = decision.plan.step(key.step_index) if decision is not None else None
        recorded_now = decision is not None and decision.changed
        if recorded_now:
            log.info(
                "form answered",
                extra=ids(conversation)
                | {"plan": key.plan_id, "step": key.step_index, "attempt": key.attempt},
            )
    if not form_answers.recorded(step, answer):
        if open_now and not same:  # the first answer is being recorded right now
            return _answered_by(answer.answered_by)
        return _closed(step)  # the form closed before its stored answer was recorded
    assert step is not None  # recorded
    if same and files:  # kept each once; the ones not taken are told once
        if kept is None:  # a replay of an answer recorded before
            kept = await _keep_files(service, conversation, where, files)
        if recorded_now:
            _tell_refused(service, conversation, where, kept)
    await _show(service, stored, step, rewrite)
    return None if same else _answered_by(answer.answered_by)


async def _stored(
    service: SlackService, given: FormAnswer, open_now: bool, inbox: InboxFinish | None
) -> StoredAnswer | None:
    """The form's answer: `given` stored first while the form is open (with `inbox`
    finished in the same write when given is the form's answer), else as stored."""
    if not open_now:
        return await form_answers.stored(service.db, given.conversation_id, given.key)
    also = inbox.finish_in if inbox is not None else None
    stored = await form_answers.store(service.db, service.clock(), given, also_if_same=also)
    if inbox is not None:
        inbox.committed()  # finished with the answer: the listener's own finish writes nothing
    return stored


async def _show(
    service: SlackService, stored: StoredAnswer, step: Step, rewrite: Rewrite | None
) -> None:
    """The form's message shows the stored answer: through `rewrite` (then its row is
    delivered), else by the executor's chat.update, at once. Nothing when it shows it."""
    answer = stored.answer
    if stored.sent or answer.message_ts is None:
        return
    if service.executor.outbox.performed(stored.row_id):
        return  # shown by a click this process served; its row is marked sent with the next
    text, blocks = answered_form(step, answer.values, answer.answered_by)
    if rewrite is not None and await rewrite(text, [b.to_dict() for b in blocks]):
        service.executor.outbox.delivered(stored.row_id)
        return
    await form_answers.hurry(service.db, service.clock(), answer)
    service.wake()


async def _keep_files(
    service: SlackService,
    conversation: ConversationRecord,
    where: str,
    files: Sequence[SlackFile],
) -> tuple[ReceivedFile, ...]:
    """A form answer's attachments, recorded with the conversation (the next steps' runs fetch
    them; each once)."""
    received = tuple(received_file(f, service.options.files) for f in files)
    await record_attachments(service.db, service.clock(), conversation.id, where, received)
    return received


def _tell_refused(
    service: SlackService,
    conversation: ConversationRecord,
    where: str,
    received: tuple[ReceivedFile, ...],
) -> None:
    """The attachments not taken get a sentence."""
    refused = refused_note(
        Incoming(channel=conversation.channel_id, ts=where, text="", files=received)
    )
    if refused is not None:
        service.events.start(lambda: _say(service, conversation, refused))


async def _say(service: SlackService, conversation: ConversationRecord, text: str) -> None:
    await service.say(conversation, text)


async def form_refusal(
    service: SlackService,
    *,
    key: FormKey,
    user: str,
    channel: str,
    thread_ts: str,
    thread: FormThread | None = None,
) -> str | None:
    """Why `user` cannot answer the form `key` now (a sentence), or None while it is theirs
    to answer: a submission that is refused anyway is told so before what it lacks.
    `thread`: the form's thread as just read (else read here)."""
    thread = thread or await form_thread(service, channel, thread_ts)
    found = await _form_step(service, thread, key=key, user=user)
    if isinstance(found, str):
        return found
    conversation, step = found
    if is_open(step, key):
        return None
    answer_key = form_answer_key(key.plan_id, key.step_index, key.attempt, key.round)
    stored = await form_answers.stored(service.db, conversation.id, answer_key)
    if stored is not None and form_answers.recorded(step, stored.answer):
        return _answered_by(stored.answer.answered_by)
    return _closed(step)


async def _form_step(
    service: SlackService, thread: FormThread, *, key: FormKey, user: str
) -> str | tuple[ConversationRecord, Step]:
    """The conversation and step of the form `key`, if `user` may answer it (else why not)."""
    conversation, plan, step = thread.conversation, thread.plan, thread.step(key)
    if conversation is None or plan is None or step is None or plan.id != key.plan_id:
        return "This form belongs to a plan that no longer exists."
    refused = await _may_answer(service, conversation, user)
    if refused:
        return refused
    return conversation, step


def is_open(step: Step, key: FormKey) -> bool:
    """Whether the form `key` still waits for its answer."""
    question = step.question
    return step.attempts == key.attempt and (
        (step.assignee == USER and step.status == "in_progress")
        or (step.status == "blocked" and question is not None and question.round == key.round)
    )


def _answered_by(user: str) -> str:
    return f"This form was already answered by <@{user}>."


def _closed(step: Step | None) -> str:
    answered_by = step.question.answered_by if step is not None and step.question else None
    if answered_by:
        return _answered_by(answered_by)
    if step is None or step.status in ("done", "skipped", "failed"):
        return "This form was already answered."
    return "This form is no longer open: the plan has moved on."


async def _may_answer(
    service: SlackService, conversation: ConversationRecord, user: str
) -> str | None:
    if service.options.form_answerers == "anyone" or user == conversation.requested_by:
        return None
    if await service.is_admin(user):
        return None
    return f"Only <@{conversation.requested_by}>, who made the request, can answer this form."
