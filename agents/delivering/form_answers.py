"""A form's answer: stored first, then recorded in the plan, then shown in the form's message.

A form's message must never keep showing its inputs once its answer counts – not after a
crash between recording the answer and rewriting the message, not after Slack failed the
rewrite. So the answer is stored before anything else, as an outbox row (`FormAnswer`,
one per form: the first answer stored is the form's) holding who answered what and where
the form's message is, and that row's delivery does the rest: it records the answer (a
reconcile, de-duplicated by its event key) and rewrites the message with chat.update, at
least once, retried like every outbox effect; the rewrite is idempotent (the same text
again). The click that stored it normally does the same at once – the reconcile, then the
rewrite through its own `response_url` (no Web API call) – and marks the row delivered;
for that the row waits a grace period before any sender takes it (`bot/form_answers.py`).

So whoever clicks later – the same click replayed from the inbox, a double click, another
person – finds the stored answer: the form is shown with it (never with the later click's
values), and only a click with another answer is told it was answered already.

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
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from flotilla.agents.planning.decisions import Decision
from flotilla.agents.planning.effects import FormAnswer, form_answer_key, from_row, to_row
from flotilla.agents.planning.plan import USER, Step, StepAnswered
from flotilla.agents.reconciling.ports import PostingRefused
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.agents.running.run_context import Context
from flotilla.storage.db import Also, Database
from flotilla.storage.outbox import due_now, store_first, stored_row
from flotilla.storage.records import ConversationRecord, StoredRow

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    """A form's stored answer and the state of its row."""

    answer: FormAnswer
    row_id: int
    sent: bool  # shown already (or given up)


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
        if also_if_same is not None and same(stored.answer, answer):
            await also_if_same(conn)
    return stored


def same(first: FormAnswer, given: FormAnswer) -> bool:
    """Whether `given` is the form's answer `first` again (a replay, a double click)."""
    return first.answered_by == given.answered_by and first.values == given.values


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


def recorded(step: Step | None, answer: FormAnswer) -> bool:
    """Whether `step` (as stored) holds `answer`: a user step done by it, or a blocked
    step's question answered with it. False when the form closed without it (a cancel)."""
    if step is None or step.attempts != answer.attempt:
        return False
    if step.assignee == USER:
        return step.status == "done"
    question = step.question
    return (
        question is not None
        and question.round == answer.round
        and question.answered_by == answer.answered_by
        and question.answer == answer.values
    )


async def perform(ctx: Context, conversation: ConversationRecord, answer: FormAnswer) -> None:
    """The outbox's delivery of a stored answer: recorded (if the click that stored it did
    not get that far), then shown in the form's message. Again after a crash: idempotent."""
    decision = await record(ctx.reconciler, answer, await ctx.enabled_names())
    step = decision.plan.step(answer.step) if decision is not None else None
    if step is None or not recorded(step, answer):
        log.info("form answer %s was not recorded: its form closed before", answer.key)
        return
    if answer.message_ts is None:
        return
    try:
        await ctx.port.show_answer(conversation, answer, step)
    except PostingRefused as exc:  # the message is gone (deleted, the channel left)
        log.warning("could not show the answer in form %s: %s", answer.message_ts, exc)
