"""The rules of a form, pure: which step of which plan a form asks for, whether it still
waits for its answer, who may answer it, whether an answer is the one the form has (the same
answer twice) and whether its step holds it, and every sentence a refused answer is told.

A form is named by its plan, step, attempt and round (`FormRef`; the bot's `FormKey` is
one). Nothing here reads or writes: the plan as read, the stored answer and whether the
person is an admin are passed in, and `agents/delivering/form_answers.py` does the reading,
storing and recording around these rules.
"""

from __future__ import annotations

from typing import Literal, Protocol

from flotilla.agents.planning.effects import FormAnswer
from flotilla.agents.planning.plan import USER, FormSpec, Plan, Step
from flotilla.agents.planning.plan_transitions import CANCELLED_NOTE

Answerers = Literal["requester", "anyone"]
"""Who may answer a form: the person who made the request (and admins), or anyone."""

NO_PLAN = "This form belongs to a plan that no longer exists."
ANSWERED = "This form was already answered."
MOVED_ON = "This form is no longer open: the plan has moved on."
CANCELLED = "This form is closed: the plan was cancelled."
SKIPPED = "This form is closed: its step was skipped."
_FINISHED = ("done", "failed")


class FormRef(Protocol):
    """Which question a form answers: a step's attempt, and the n-th question of it."""

    @property
    def plan_id(self) -> int: ...
    @property
    def step_index(self) -> int: ...
    @property
    def attempt(self) -> int: ...
    @property
    def round(self) -> int: ...
    def encode(self) -> str:
        """The form's key as its elements carry it (`form:<plan>:<step>:<attempt>:<round>`)."""
        ...


def form_step(plan: Plan | None, form: FormRef) -> Step | None:
    """The step the form asks for, when `plan` is the form's plan and has that step."""
    if plan is None or plan.id != form.plan_id:
        return None
    return plan.step(form.step_index)


def form_of(step: Step | None) -> tuple[str, str, FormSpec | None]:
    """The title, question and fields of a step's form, as stored in the plan: a blocked
    agent's question, or a user step's input."""
    if step is None:
        return "", "", None
    if step.question is not None and step.assignee != USER:
        return step.title, step.question.text, step.question.form
    return step.title, step.input or step.title, step.form


def is_open(step: Step, form: FormRef) -> bool:
    """Whether the form still waits for its answer: its user step in progress, or its
    question the one its blocked step asks now – both in the form's attempt."""
    question = step.question
    return step.attempts == form.attempt and (
        (step.assignee == USER and step.status == "in_progress")
        or (step.status == "blocked" and question is not None and question.round == form.round)
    )


def needs_admin(user: str, *, requested_by: str | None, answerers: Answerers) -> bool:
    """Whether only being an admin would let `user` answer (ask then, and only then)."""
    return answerers != "anyone" and user != requested_by


def answerer_refusal(
    user: str, *, requested_by: str | None, answerers: Answerers, admin: bool
) -> str | None:
    """Why `user` may not answer a form of `requested_by`'s request, or None when they may."""
    if not needs_admin(user, requested_by=requested_by, answerers=answerers) or admin:
        return None
    return f"Only <@{requested_by}>, who made the request, can answer this form."


def answered_by(user: str) -> str:
    """The refusal of a form someone answered already."""
    return f"This form was already answered by <@{user}>."


def closed(step: Step | None) -> str:
    """The refusal of a form that no longer waits for an answer (`step`: its step now)."""
    who = step.question.answered_by if step is not None and step.question else None
    if who:
        return answered_by(who)
    if step is not None and step.status == "skipped":
        cancelled = (step.failure_reason or "").startswith(CANCELLED_NOTE)
        return CANCELLED if cancelled else SKIPPED
    if step is None or step.status in _FINISHED:
        return ANSWERED
    return MOVED_ON


def same(first: FormAnswer, given: FormAnswer) -> bool:
    """Whether `given` is the form's answer `first` again (a replay, a double click)."""
    return first.answered_by == given.answered_by and first.values == given.values


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


def told(step: Step | None, answer: FormAnswer, *, same: bool, was_open: bool) -> str | None:
    """What a click is told once the form's answer (`answer`, stored) was recorded if it
    could be (`step`: its step then): nothing when its answer is the form's and counts;
    who answered when another answer counts, or is being recorded right now (the form was
    open at the click); else why the form closed without it (a cancel, a move on)."""
    if not recorded(step, answer):
        return answered_by(answer.answered_by) if was_open and not same else closed(step)
    return None if same else answered_by(answer.answered_by)


def closed_refusal(step: Step, stored: FormAnswer | None) -> str:
    """Why a closed form takes no answer: who answered it when its stored answer counts,
    else why it closed (`closed`)."""
    if stored is not None and recorded(step, stored):
        return answered_by(stored.answered_by)
    return closed(step)
