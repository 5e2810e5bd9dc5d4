"""A form's answer, from the click (or modal submission) that gives it to the plan going on:
who may answer, stored first, recorded in the plan, shown in the form's message; and the
outbox's delivery of a stored answer. The rules these apply (open, who may, the same answer
twice, a cancelled plan, the sentences) are `agents/planning/form_rules.py`; the bot's
listener (`bot/listeners/forms.py`) parses the click, calls `answer_form` or `form_refusal`,
and renders what they give back.

A form's message must never keep showing its inputs once its answer counts – not after a
crash between recording the answer and rewriting the message, not after Slack failed the
rewrite. So the answer is stored before anything else, as an outbox row (`FormAnswer`,
one per form: the first answer stored is the form's) holding who answered what and where
the form's message is, and that row's delivery does the rest (`perform`): it records the
answer (a reconcile, de-duplicated by its event key) and rewrites the message with
chat.update, at least once, retried like every outbox effect; the rewrite is idempotent
(the same text again). The click that stored it normally does the same at once
(`answer_form`) – the reconcile, then the rewrite through its own `response_url` (the
listener's `ShowAnswer`: no Web API call) – and marks the row delivered; for that the row
waits `REWRITE_GRACE` before any sender takes it, so a live click's own rewrite comes first.
With no rewrite to try (a modal's submission, a click replayed from the inbox) or when it
fails, the row is made due at once and the executor's chat.update shows the answer.

So whoever clicks later – the same click replayed from the inbox, a double click, another
person – finds the stored answer: a replay or a double click of the same answer is taken
silently, and the form shown with it if it is not yet; a click with another answer (a
second person, or second thoughts) is told who answered, and the form is shown with the
stored answer – never with the later click's values.

Why stored by the click rather than decided by the reconcile that records the answer: a
decided effect would be handed to this process's sender at once and race the click's own
response_url (or wait, undecided, for a grace the pure decision knows nothing of); who
answered a user step is not kept in its plan, so a later click could be neither told nor
shown it; and a row keyed by the form makes "the first answer wins" one insert, before
the plan is touched. The plan stays what it was: the answer is recorded by the same
reconcile as before, and the stored answer is its one record of who and what.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from flotilla.agents.core.clock import Clock
from flotilla.agents.planning import form_rules
from flotilla.agents.planning.decisions import Decision
from flotilla.agents.planning.effects import FormAnswer, form_answer_key, from_row, to_row
from flotilla.agents.planning.form_rules import Answerers, FormRef
from flotilla.agents.planning.plan import FormSpec, Plan, Step, StepAnswered
from flotilla.agents.reconciling.inbox import InboxFinish, record_attachments
from flotilla.agents.reconciling.outbox import OutboxSender
from flotilla.agents.reconciling.ports import PostingRefused
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.agents.running.run_context import Context
from flotilla.agents.running.step_runs import ids
from flotilla.agents.tools.attachment_refusals import refused_note
from flotilla.storage.db import Also, Database
from flotilla.storage.files import ReceivedFile
from flotilla.storage.outbox import due_now, store_first, stored_row
from flotilla.storage.records import ConversationRecord, StoredRow

log = logging.getLogger(__name__)

# how long a stored answer waits for its click's own rewrite before any process's outbox
# sender shows it with chat.update (the response_url is given 10 s, the reconcile the rest)
REWRITE_GRACE = timedelta(seconds=60)

ShowAnswer = Callable[[Step, dict[str, str], str], Awaitable[bool]]
"""Shows a form's answer – its step, the values, who answered – in the form's own message,
rewritten in place (the bot renders it and uses the click's response_url); False when it
could not (then the executor's chat.update does)."""


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    """A form's stored answer and the state of its row."""

    answer: FormAnswer
    row_id: int
    sent: bool  # shown already (or given up)


@dataclass(frozen=True, slots=True)
class FormThread:
    """A form's thread as read once for a click or a submission: its conversation and its
    newest plan (None when there is none). The listener reads it to know the form's fields;
    the answer is then checked against the same read (`answer_form`, `form_refusal`)."""

    conversation: ConversationRecord | None
    plan: Plan | None

    def step(self, form: FormRef) -> Step | None:
        """The step of the form in the plan read (of any plan: `form_rules.form_step` checks
        that the plan is the form's)."""
        return self.plan.step(form.step_index) if self.plan is not None else None

    def form(self, form: FormRef) -> tuple[str, str, FormSpec | None]:
        """The title, question and fields of the form (as stored in the plan)."""
        return form_rules.form_of(self.step(form))


@dataclass(frozen=True, slots=True)
class FormDesk:
    """What answering a form needs of the process serving the click (the bot's listener
    makes one from its service)."""

    db: Database
    clock: Clock
    reconciler: Reconciler
    sender: OutboxSender  # this process's: a row shown by a click is marked delivered here
    answerers: Answerers  # the setting: the requester (and admins), or anyone
    is_admin: Callable[[str], Awaitable[bool]]  # a workspace admin (asked only when it counts)
    enabled_names: Callable[[], Awaitable[Collection[str]]]  # the agents a plan may use
    say: Callable[[ConversationRecord, str], Awaitable[object]]  # a sentence in the thread
    start: Callable[[Callable[[], Awaitable[None]]], None]  # work not awaited (after the ack)
    wake: Callable[[], None]  # the outbox sender: a row was made due


async def answer_form(
    desk: FormDesk,
    thread: FormThread,
    form: FormRef,
    *,
    values: dict[str, str],
    user: str,
    message_ts: str | None,
    files: Sequence[ReceivedFile] = (),
    show: ShowAnswer | None = None,
    inbox: InboxFinish | None = None,
) -> str | None:
    """Store, record and show a form's answer (and keep the files attached to it). Returns a
    refusal sentence, or None when this answer is the form's (also when it was already:
    a replay, a double click). `thread`: the form's thread as just read; `show`: the click's
    own rewrite of the form's message, if it has one; `inbox`: the click's stored request,
    finished with the answer's store when that is all a crash could lose (no files: the
    answer's outbox row records and shows it). See the module."""
    found = await _form_step(desk, thread, form, user)
    if isinstance(found, str):
        return found
    conversation, step_read = found
    step: Step | None = step_read
    now = desk.clock()
    given = form_answer(
        conversation.id,
        plan_id=form.plan_id,
        step=form.step_index,
        attempt=form.attempt,
        round=form.round,
        values=values,
        answered_by=user,
        event_key=f"{form.encode()}:answered",
        message_ts=message_ts,
        available_at=now + REWRITE_GRACE if show is not None else None,
    )
    open_now = form_rules.is_open(step_read, form)
    stored_answer = await _store(desk, given, open_now, inbox if not files else None)
    if stored_answer is None:  # closed with no answer stored (cancelled; answered long ago)
        return form_rules.closed(step)
    answer = stored_answer.answer
    same = form_rules.same(answer, given)
    recorded_now = False  # by this click (not a replay, a double click, the executor)
    where = message_ts or form.encode()
    kept = False
    if same and open_now:
        if files:  # kept before the answer is recorded: the step it starts finds them
            await _keep_files(desk, conversation, where, files)
            kept = True
        decision = await record(desk.reconciler, answer, await desk.enabled_names())
        step = decision.plan.step(form.step_index) if decision is not None else None
        recorded_now = decision is not None and decision.changed
        if recorded_now:
            log.info(
                "form answered",
                extra=ids(conversation)
                | {"plan": form.plan_id, "step": form.step_index, "attempt": form.attempt},
            )
    told = form_rules.told(step, answer, same=same, was_open=open_now)
    if not form_rules.recorded(step, answer):
        return told
    assert step is not None  # recorded
    if same and files:  # kept each once; the ones not taken are told once
        if not kept:  # a replay of an answer recorded before
            await _keep_files(desk, conversation, where, files)
        if recorded_now:
            _tell_refused(desk, conversation, files)
    await _show(desk, stored_answer, step, show)
    return told


async def form_refusal(
    desk: FormDesk, thread: FormThread, form: FormRef, *, user: str
) -> str | None:
    """Why `user` cannot answer the form now (a sentence), or None while it is theirs to
    answer: a submission that is refused anyway is told so before what it lacks.
    `thread`: the form's thread as just read."""
    found = await _form_step(desk, thread, form, user)
    if isinstance(found, str):
        return found
    conversation, step = found
    if form_rules.is_open(step, form):
        return None
    answer_key = form_answer_key(form.plan_id, form.step_index, form.attempt, form.round)
    found_answer = await stored(desk.db, conversation.id, answer_key)
    return form_rules.closed_refusal(step, found_answer.answer if found_answer else None)


async def _form_step(
    desk: FormDesk, thread: FormThread, form: FormRef, user: str
) -> str | tuple[ConversationRecord, Step]:
    """The conversation and step of the form, if `user` may answer it (else why not)."""
    conversation, step = thread.conversation, form_rules.form_step(thread.plan, form)
    if conversation is None or step is None:
        return form_rules.NO_PLAN
    requested_by, answerers = conversation.requested_by, desk.answerers
    ask = form_rules.needs_admin(user, requested_by=requested_by, answerers=answerers)
    admin = ask and await desk.is_admin(user)  # asked only when it decides
    refused = form_rules.answerer_refusal(
        user, requested_by=requested_by, answerers=answerers, admin=admin
    )
    return refused if refused is not None else (conversation, step)


async def _store(
    desk: FormDesk, given: FormAnswer, open_now: bool, inbox: InboxFinish | None
) -> StoredAnswer | None:
    """The form's answer: `given` stored first while the form is open (with `inbox`
    finished in the same write when given is the form's answer), else as stored."""
    if not open_now:
        return await stored(desk.db, given.conversation_id, given.key)
    also = inbox.finish_in if inbox is not None else None
    found = await store(desk.db, desk.clock(), given, also_if_same=also)
    if inbox is not None:
        inbox.committed()  # finished with the answer: the listener's own finish writes nothing
    return found


async def _show(desk: FormDesk, row: StoredAnswer, step: Step, show: ShowAnswer | None) -> None:
    """The form's message shows the stored answer: through `show` (then its row is
    delivered), else by the executor's chat.update, at once. Nothing when it shows it."""
    answer = row.answer
    if row.sent or answer.message_ts is None:
        return
    if desk.sender.performed(row.row_id):
        return  # shown by a click this process served; its row is marked sent with the next
    if show is not None and await show(step, answer.values, answer.answered_by):
        desk.sender.delivered(row.row_id)
        return
    await hurry(desk.db, desk.clock(), answer)
    desk.wake()


async def _keep_files(
    desk: FormDesk, conversation: ConversationRecord, where: str, files: Sequence[ReceivedFile]
) -> None:
    """A form answer's attachments, recorded with the conversation (the next steps' runs fetch
    them; each once)."""
    await record_attachments(desk.db, desk.clock(), conversation.id, where, tuple(files))


def _tell_refused(
    desk: FormDesk, conversation: ConversationRecord, files: Sequence[ReceivedFile]
) -> None:
    """The attachments not taken get a sentence (said after the answer, not awaited)."""
    note = refused_note(files)
    if note is None:
        return

    async def say() -> None:
        await desk.say(conversation, note)

    desk.start(say)


# --- the stored answer: one row per form, the first stored wins -------------------------


def form_answer(
    conversation_id: int,
    *,
    plan_id: int,
    step: int,
    attempt: int,
    round: int,
    values: dict[str, str],
    answered_by: str,
    event_key: str,
    message_ts: str | None,
    available_at: datetime | None = None,
) -> FormAnswer:
    """A form's answer as its effect (`available_at`: not delivered before, see the module)."""
    return FormAnswer(
        key=form_answer_key(plan_id, step, attempt, round),
        conversation_id=conversation_id,
        available_at=available_at,
        plan_id=plan_id,
        step=step,
        attempt=attempt,
        round=round,
        values=values,
        answered_by=answered_by,
        event_key=event_key,
        message_ts=message_ts,
    )


async def store(
    db: Database, now: datetime, answer: FormAnswer, *, also_if_same: Also | None = None
) -> StoredAnswer:
    """Store `answer` unless the form has one; the form's answer (this one, or the first).
    `also_if_same`: more work of the caller's in the same transaction, when the form's
    answer is `answer`'s (who answered, and what: `same`)."""
    async with db.write() as conn:
        row = await store_first(conn, to_row(answer), now)
        stored = _stored(answer.key, answer.conversation_id, row)
        if also_if_same is not None and form_rules.same(stored.answer, answer):
            await also_if_same(conn)
    return stored


async def stored(db: Database, conversation_id: int, key: str) -> StoredAnswer | None:
    """The answer stored for a form (`key`: its `form_answer_key`), if one is."""
    async with db.read() as conn:
        row = await stored_row(conn, key)
    return _stored(key, conversation_id, row) if row is not None else None


def _stored(key: str, conversation_id: int, row: StoredRow) -> StoredAnswer:
    effect = from_row(key, "form_answer", conversation_id, row.payload)
    assert isinstance(effect, FormAnswer)
    return StoredAnswer(effect, row.id, row.sent)


async def hurry(db: Database, now: datetime, answer: FormAnswer) -> None:
    """The answer's row due at once (its grace for the click's own rewrite is over)."""
    async with db.write() as conn:
        await due_now(conn, answer.key, now)


async def record(
    reconciler: Reconciler, answer: FormAnswer, assignees: Collection[str]
) -> Decision | None:
    """Record the answer in its plan (idempotent: its event key is recorded with it)."""
    outcome = StepAnswered(
        index=answer.step,
        values=dict(answer.values),
        answered_by=answer.answered_by,
        attempt=answer.attempt,
        round=answer.round,
    )
    return await reconciler.reconcile(
        answer.conversation_id,
        event_key=answer.event_key,
        outcomes=[outcome],
        assignees=assignees,
    )


async def perform(ctx: Context, conversation: ConversationRecord, answer: FormAnswer) -> None:
    """The outbox's delivery of a stored answer: recorded (if the click that stored it did
    not get that far), then shown in the form's message. Again after a crash: idempotent."""
    decision = await record(ctx.reconciler, answer, await ctx.enabled_names())
    step = decision.plan.step(answer.step) if decision is not None else None
    if step is None or not form_rules.recorded(step, answer):
        log.info("form answer %s was not recorded: its form closed before", answer.key)
        return
    if answer.message_ts is None:
        return
    try:
        await ctx.port.show_answer(conversation, answer, step)
    except PostingRefused as exc:  # the message is gone (deleted, the channel left)
        log.warning("could not show the answer in form %s: %s", answer.message_ts, exc)
