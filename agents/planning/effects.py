"""Typed effects: what the reconciler decides and the outbox performs after commit.

One pydantic model per kind, a discriminated union on `kind`. An effect is stored as an
outbox row: its `key`, `kind`, `conversation_id` and `available_at` are columns, the rest
of the model is the row's JSON payload (`to_row`/`from_row`). This module is also the one
place that builds idempotency keys; nothing parses a key back – whatever a performer needs
travels as a typed field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from flotilla.agents.planning.plan import FormSpec, OnFailure

# --- keys ---------------------------------------------------------------------------------


def step_key(plan_id: int, step: int, attempt: int) -> str:
    """A step attempt's dispatch key; also the key of its agent run (`agent_runs.run_key`)."""
    return f"plan:{plan_id}:step:{step}:attempt:{attempt}"


def result_key(plan_id: int, step: int, attempt: int) -> str:
    """The key a step's answer carries in the thread (its message metadata)."""
    return f"{step_key(plan_id, step, attempt)}:result"


def question_key(plan_id: int, step: int, attempt: int, round: int) -> str:
    return f"{step_key(plan_id, step, attempt)}:question:{round}"


def answer_key(plan_id: int, step: int, attempt: int, round: int) -> str:
    return f"{step_key(plan_id, step, attempt)}:answer:{round}"


def form_answer_key(plan_id: int, step: int, attempt: int, round: int) -> str:
    """A form's answer (one per form: the first stored is the form's,
    `agents/delivering/form_answers.py`)."""
    return f"{step_key(plan_id, step, attempt)}:form:{round}:answered"


def retry_key(plan_id: int, step: int, attempt: int) -> str:
    return f"{step_key(plan_id, step, attempt)}:retry"


def failed_key(plan_id: int, step: int, attempt: int, turn: int = 1) -> str:
    """The commander's decision on a failed step; `turn` > 1 for a retried decision."""
    base = f"{step_key(plan_id, step, attempt)}:failed"
    return base if turn == 1 else f"{base}:turn:{turn}"


def failure_notice_key(plan_id: int, step: int, attempt: int) -> str:
    """The sentence telling people a step attempt really failed (posted once)."""
    return f"{step_key(plan_id, step, attempt)}:failure"


def final_answer_key(plan_id: int) -> str:
    """The commander's final answer of a completed plan: its run's key (paid once)."""
    return f"plan:{plan_id}:final"


def card_key(plan_id: int, version: int) -> str:
    return f"plan:{plan_id}:card:v{version}"


def card_message_key(plan_id: int) -> str:
    """The key the plan card's message carries (a lost answer to its post is found again)."""
    return f"plan:{plan_id}:card"


def finished_key(plan_id: int) -> str:
    return f"plan:{plan_id}:finished"


def stopped_key(plan_id: int) -> str:
    return f"plan:{plan_id}:stopped"


def turn_key(conversation_id: int, message_ts: str) -> str:
    """A person's message for the commander (one turn per message)."""
    return f"turn:{conversation_id}:{message_ts}"


def commander_run_key(effect_key: str) -> str:
    """The stored commander session of the turn an effect started."""
    return f"commander:{effect_key}"


def stalled_key(plan_id: int, version: int) -> str:
    """The stall check of a plan after a commander turn at this plan version."""
    return f"plan:{plan_id}:stalled:v{version}"


# --- the effects --------------------------------------------------------------------------


class _Effect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str
    conversation_id: int
    available_at: datetime | None = None  # not before this time (timers); None: at once


class _StepEffect(_Effect):
    plan_id: int
    step: int
    attempt: int


class PostDispatch(_StepEffect):
    """Post `@agent <input>` in the thread, then run the agent on the step."""

    kind: Literal["post_dispatch"] = "post_dispatch"
    agent: str
    title: str
    text: str
    # a transient failure's retry: the try this is and of how many (0: a first dispatch);
    # the step's earlier dispatch message is edited instead of posting a second one
    retry: int = 0
    max_tries: int = 0


class ShowForm(_StepEffect):
    """A user step: a Block Kit form in the thread (the plan pauses until it is answered)."""

    kind: Literal["show_form"] = "show_form"
    title: str
    text: str
    form: FormSpec | None = None


class RunCommanderStep(_StepEffect):
    """A step assigned to the commander itself (usually the synthesis)."""

    kind: Literal["run_commander_step"] = "run_commander_step"
    title: str
    text: str


class AskCommander(_StepEffect):
    """A step failed under `ask_commander`: a commander turn decides what happens next."""

    kind: Literal["ask_commander"] = "ask_commander"
    title: str
    assignee: str
    failure_reason: str
    transient_failures: int = 0
    input: str = ""
    waiting: list[int] = []
    turn: int = 1  # the n-th decision turn on this failure (bounded)


class AskUser(_StepEffect):
    """A blocked step's question (or form) for a person."""

    kind: Literal["ask_user"] = "ask_user"
    question: str
    form: FormSpec | None = None
    round: int = 1


class ResumeStep(_StepEffect):
    """A blocked step was answered: resume the same run with the answer."""

    kind: Literal["resume_step"] = "resume_step"
    agent: str
    question: str
    answer: dict[str, str]
    answered_by: str
    round: int = 1


class FormAnswer(_StepEffect):
    """A form's answer, stored before it is recorded: recorded by a reconcile (`event_key`),
    then shown in the form's message – who answered what (`agents/delivering/form_answers.py`). Not
    decided by a reconcile: a person's click stores it, and the first one stored is the
    form's answer."""

    kind: Literal["form_answer"] = "form_answer"
    round: int = 1
    values: dict[str, str]
    answered_by: str
    event_key: str  # the reconcile's de-duplication key of the answer
    message_ts: str | None = None  # the form's message (None: nothing to rewrite)


class StepFailureNotice(_StepEffect):
    """A step really failed: say so once, in words, with what happens next (`on_failure`)."""

    kind: Literal["step_failure_notice"] = "step_failure_notice"
    assignee: str
    title: str
    reason: str
    on_failure: OnFailure


class UpdatePlanCard(_Effect):
    """Re-render the plan card (coalesced: at most one waiting per plan)."""

    kind: Literal["update_plan_card"] = "update_plan_card"
    plan_id: int
    version: int


class RetryDue(_StepEffect):
    """A timer: reconcile the conversation when a step's backoff has passed."""

    kind: Literal["retry_due"] = "retry_due"


class PlanFinished(_Effect):
    """The plan completed or was aborted: close the thread with an answer or a reason."""

    kind: Literal["plan_finished"] = "plan_finished"
    plan_id: int
    status: Literal["completed", "aborted"]
    reason: str | None = None  # why an aborted plan was stopped (an abort's own reason)


class PlanStopped(_Effect):
    """The plan was cancelled: stop its runs, close its forms, say so once."""

    kind: Literal["plan_stopped"] = "plan_stopped"
    plan_id: int
    reason: str
    by: str | None = None  # the Slack user who cancelled it, if a person did


class MessageForCommander(_Effect):
    """A person's message for the commander: a new request, or an interjection."""

    kind: Literal["commander_turn"] = "commander_turn"
    text: str
    user: str
    ts: str


class PlanStalled(_Effect):
    """After a commander turn: if the plan has nothing in flight, no timer and no person
    asked, the commander is asked again (bounded), then the requester."""

    kind: Literal["plan_stalled"] = "plan_stalled"
    plan_id: int
    version: int
    attempt: int = 1


Effect = Annotated[
    PostDispatch
    | ShowForm
    | RunCommanderStep
    | AskCommander
    | AskUser
    | ResumeStep
    | FormAnswer
    | StepFailureNotice
    | UpdatePlanCard
    | RetryDue
    | PlanFinished
    | PlanStopped
    | MessageForCommander
    | PlanStalled,
    Field(discriminator="kind"),
]
StepEffect = PostDispatch | ShowForm | RunCommanderStep | AskCommander | AskUser | ResumeStep

_adapter: TypeAdapter[Effect] = TypeAdapter(Effect)
_COLUMNS = {"key", "kind", "conversation_id", "available_at"}


def to_row(effect: Effect) -> dict[str, Any]:
    """The outbox row of an effect (`storage.outbox.enqueue_effects` takes these)."""
    return {
        "idempotency_key": effect.key,
        "kind": effect.kind,
        "conversation_id": effect.conversation_id,
        "payload": effect.model_dump(mode="json", exclude=_COLUMNS),
        "available_at": effect.available_at,
    }


def from_row(
    key: str, kind: str, conversation_id: int, payload: dict[str, Any], available_at: Any = None
) -> Effect:
    """An outbox row as its typed effect (raises `pydantic.ValidationError` when malformed)."""
    kind, payload = _legacy(kind, payload)
    data = {**payload, "key": key, "kind": kind, "conversation_id": conversation_id}
    if available_at is not None:
        data["available_at"] = available_at
    return _adapter.validate_python(data)


def _legacy(kind: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Rows written before effects were typed: `wake_commander` carried its reason."""
    if kind != "wake_commander":
        return kind, payload
    rest = {k: v for k, v in payload.items() if k != "reason"}
    reason = payload.get("reason")
    if reason == "step":
        return "run_commander_step", rest
    if reason == "plan_finished":
        return "plan_finished", rest
    return "ask_commander", rest
