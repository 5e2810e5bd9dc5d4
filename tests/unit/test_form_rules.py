"""The rules of a form (`agents/planning/form_rules.py`): which step a form asks for, whether
it is open, who may answer it, the same answer twice, whether its step holds an answer, and
what a refused click is told – examples, then properties over random steps and answers."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from flotilla.agents.planning import form_rules
from flotilla.agents.planning.effects import FormAnswer, form_answer_key
from flotilla.agents.planning.form_rules import ANSWERED, CANCELLED, MOVED_ON, NO_PLAN, SKIPPED
from flotilla.agents.planning.plan import USER, FormField, FormSpec, Plan, Question, Step
from flotilla.bot.views.forms import FormKey

FORM = FormKey(plan_id=7, step_index=1, attempt=1, round=1)
SPEC = FormSpec(fields=[FormField(name="colour", label="Colour")])
KNOWN = re.compile(
    r"This form belongs to a plan that no longer exists\."
    r"|This form was already answered by <@U[A-Z0-9]+>\."
    r"|This form was already answered\."
    r"|This form is no longer open: the plan has moved on\."
    r"|This form is closed: (the plan was cancelled|its step was skipped)\."
    r"|Only <@U[A-Z0-9]+>, who made the request, can answer this form\."
)


def user_step(status: str = "in_progress", attempts: int = 1) -> Step:
    return Step.model_validate(
        {
            "index": 1,
            "title": "Pick",
            "assignee": USER,
            "input": "Which colour?",
            "form": SPEC,
            "status": status,
            "attempts": attempts,
        }
    )


def blocked_step(
    round: int = 1, answer: dict[str, str] | None = None, by: str | None = None
) -> Step:
    question = Question(text="Which one?", form=SPEC, round=round, answer=answer, answered_by=by)
    status = "blocked" if answer is None else "in_progress"
    return Step.model_validate(
        {
            "index": 1,
            "title": "Write",
            "assignee": "writer",
            "status": status,
            "attempts": 1,
            "question": question,
        }
    )


def answer(values: dict[str, str] | None = None, by: str = "U1", round: int = 1) -> FormAnswer:
    return FormAnswer(
        key=form_answer_key(7, 1, 1, round),
        conversation_id=3,
        plan_id=7,
        step=1,
        attempt=1,
        round=round,
        values=values if values is not None else {"colour": "red"},
        answered_by=by,
        event_key=f"{FORM.encode()}:answered",
    )


def test_a_form_s_step_is_found_only_in_its_own_plan() -> None:
    step = user_step()
    plan = Plan(id=7, conversation_id=3, steps=(step,))
    assert form_rules.form_step(plan, FORM) == step
    assert form_rules.form_step(None, FORM) is None
    assert form_rules.form_step(plan.model_copy(update={"id": 8}), FORM) is None
    assert form_rules.form_step(plan, FormKey(7, 2, 1)) is None


def test_a_form_shows_a_user_step_s_input_or_a_blocked_agent_s_question() -> None:
    assert form_rules.form_of(user_step()) == ("Pick", "Which colour?", SPEC)
    assert form_rules.form_of(blocked_step()) == ("Write", "Which one?", SPEC)
    assert form_rules.form_of(None) == ("", "", None)


def test_a_form_is_open_for_its_attempt_and_round_only() -> None:
    assert form_rules.is_open(user_step(), FORM)
    assert not form_rules.is_open(user_step(attempts=2), FORM)  # retried: a new form
    assert not form_rules.is_open(user_step("done"), FORM)
    assert form_rules.is_open(blocked_step(), FORM)
    assert not form_rules.is_open(blocked_step(round=2), FORM)  # asked again since
    assert not form_rules.is_open(blocked_step(answer={"colour": "red"}, by="U1"), FORM)


def test_who_may_answer() -> None:
    def refusal(user: str, answerers: form_rules.Answerers, admin: bool) -> str | None:
        return form_rules.answerer_refusal(
            user, requested_by="U1", answerers=answerers, admin=admin
        )

    assert refusal("U1", "requester", admin=False) is None
    assert refusal("U2", "requester", admin=True) is None
    assert refusal("U2", "anyone", admin=False) is None
    assert refusal("U2", "requester", admin=False) == (
        "Only <@U1>, who made the request, can answer this form."
    )
    # the admin check is asked for only when it decides
    assert form_rules.needs_admin("U2", requested_by="U1", answerers="requester")
    assert not form_rules.needs_admin("U1", requested_by="U1", answerers="requester")
    assert not form_rules.needs_admin("U2", requested_by="U1", answerers="anyone")


def test_a_closed_form_says_who_answered_or_why_it_closed() -> None:
    answered = blocked_step(answer={"colour": "red"}, by="U9")
    assert form_rules.closed(answered) == "This form was already answered by <@U9>."
    assert form_rules.closed(user_step("done")) == ANSWERED
    assert form_rules.closed(user_step("skipped")) == SKIPPED
    cancelled = user_step("skipped").model_copy(update={"failure_reason": "cancelled: by U1"})
    assert form_rules.closed(cancelled) == CANCELLED
    assert form_rules.closed(None) == ANSWERED
    assert form_rules.closed(user_step("pending")) == MOVED_ON


def test_the_same_answer_twice_and_a_recorded_answer() -> None:
    assert form_rules.same(answer(), answer())
    assert not form_rules.same(answer(), answer(by="U2"))
    assert not form_rules.same(answer(), answer({"colour": "blue"}))
    assert form_rules.recorded(user_step("done"), answer())
    assert not form_rules.recorded(user_step("skipped"), answer())
    assert not form_rules.recorded(user_step("done", attempts=2), answer())
    assert not form_rules.recorded(None, answer())
    assert form_rules.recorded(blocked_step(answer={"colour": "red"}, by="U1"), answer())
    assert not form_rules.recorded(blocked_step(answer={"colour": "red"}, by="U2"), answer())
    assert not form_rules.recorded(blocked_step(), answer())


def test_what_a_click_is_told_once_the_answer_is_stored() -> None:
    done, moved_on = user_step("done"), user_step("pending")
    assert form_rules.told(done, answer(), same=True, was_open=True) is None
    assert form_rules.told(done, answer(), same=True, was_open=False) is None  # a replay
    other = "This form was already answered by <@U1>."
    assert form_rules.told(done, answer(), same=False, was_open=True) == other
    # the first answer is being recorded right now by another click
    assert form_rules.told(user_step(), answer(), same=False, was_open=True) == other
    # the form closed before its answer was recorded (a cancel)
    assert form_rules.told(moved_on, answer(), same=True, was_open=True) == MOVED_ON
    assert form_rules.told(None, answer(), same=False, was_open=False) == ANSWERED


def test_a_closed_form_s_refusal_names_who_answered_when_it_counts() -> None:
    assert form_rules.closed_refusal(user_step("done"), answer(by="U4")) == (
        "This form was already answered by <@U4>."
    )
    assert form_rules.closed_refusal(user_step("done"), None) == ANSWERED
    assert form_rules.closed_refusal(user_step("pending"), answer()) == MOVED_ON
    assert NO_PLAN == "This form belongs to a plan that no longer exists."


# --- properties ---------------------------------------------------------------------------

USERS = st.sampled_from(["U1", "U2", "U9"])
VALUES = st.dictionaries(st.sampled_from(["colour", "size"]), st.sampled_from(["a", "b"]))


@st.composite
def steps(draw: st.DrawFn) -> Step:
    """Any stored step a form could be for: a user step, or an agent's with a question."""
    question = None
    assignee = draw(st.sampled_from([USER, "writer"]))
    if assignee != USER and draw(st.booleans()):
        answered = draw(st.booleans())
        question = Question(
            text="Which one?",
            round=draw(st.integers(1, 3)),
            answer=draw(VALUES) if answered else None,
            answered_by=draw(USERS) if answered else None,
        )
    return Step.model_validate(
        {
            "index": 1,
            "title": "A step",
            "assignee": assignee,
            "status": draw(
                st.sampled_from(["pending", "in_progress", "done", "failed", "skipped", "blocked"])
            ),
            "attempts": draw(st.integers(0, 3)),
            "question": question,
        }
    )


forms = st.builds(
    FormKey,
    plan_id=st.just(7),
    step_index=st.just(1),
    attempt=st.integers(0, 3),
    round=st.integers(1, 3),
)
answers = st.builds(answer, values=VALUES, by=USERS, round=st.integers(1, 3))


@given(step=steps(), form=forms)
def test_a_form_is_never_open_for_a_finished_step(step: Step, form: FormKey) -> None:
    if step.status in ("done", "skipped", "failed"):
        assert not form_rules.is_open(step, form)
    if form_rules.is_open(step, form):
        assert step.attempts == form.attempt


@given(
    step=st.one_of(st.none(), steps()),
    stored=answers,
    same=st.booleans(),
    was_open=st.booleans(),
    user=USERS,
    answerers=st.sampled_from(["requester", "anyone"]),
    admin=st.booleans(),
)
def test_a_refusal_is_always_one_of_the_known_sentences(
    step: Step | None,
    stored: FormAnswer,
    same: bool,
    was_open: bool,
    user: str,
    answerers: form_rules.Answerers,
    admin: bool,
) -> None:
    told = form_rules.told(step, stored, same=same, was_open=was_open)
    refusals = [
        told,
        form_rules.closed(step),
        form_rules.answerer_refusal(user, requested_by="U1", answerers=answerers, admin=admin),
    ]
    if step is not None:
        refusals.append(form_rules.closed_refusal(step, stored))
    for refusal in refusals:
        assert refusal is None or KNOWN.fullmatch(refusal), refusal
    # the form's own answer, recorded, is never refused: a replay or a double click is taken
    if same and form_rules.recorded(step, stored):
        assert told is None
