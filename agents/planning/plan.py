"""Plan models and pure DAG logic.

Validation of a proposal lives in `agents/planning/plan_validation.py` (`validate_plan`,
`parse_plan`).

CONTRACT: the names and shapes in this first section are imported by the runtime and
commander (agents/running/runtime.py, agents/running/commander.py) and by the Slack layer (bot/),
which
are being written in parallel. Add to them; do not rename or reshape them.
Pure logic below has no I/O, no clock and no randomness: time comes in as parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from flotilla.agents.core.retry_policy import STEP

OnFailure = Literal["abort_plan", "continue", "ask_commander"]
StepStatus = Literal["pending", "in_progress", "done", "failed", "skipped", "blocked"]
PlanStatus = Literal["running", "paused", "completed", "aborted", "cancelled"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FormField(_Strict):
    name: str  # machine key, [a-z][a-z0-9_]{0,39}
    label: str  # shown to the person (<= 2000 chars, Slack's label limit)
    kind: Literal["text", "long_text", "select", "file"] = "text"  # file: attachments
    options: list[str] = []  # required (1..100) for "select", empty otherwise
    required: bool = True


class FormSpec(_Strict):
    fields: list[FormField]  # 1..10 fields, unique names


class StepProposal(_Strict):
    """What the MODEL may write for a step. Runtime fields are rejected (extra=forbid)."""

    index: int
    title: str
    assignee: str  # "user", "commander", or a sub-agent name
    # a template: {{step_N.output_summary}}, {{step_N.output_files}}, {{request}}
    input: str = ""
    wait_for: list[int] | None = None  # None -> [index-1] (none for step 1)
    on_failure: OnFailure = "ask_commander"
    form: FormSpec | None = None  # only for assignee "user"


class PlanProposal(_Strict):
    steps: list[StepProposal]


# --- commander operations: explicit, validated, applied by the orchestrator -------------
# None of them can set a step done or failed.


class RetryStep(_Strict):
    op: Literal["retry_step"] = "retry_step"
    index: int
    input: str | None = None


class SkipStep(_Strict):
    op: Literal["skip_step"] = "skip_step"
    index: int
    reason: str


class AddSteps(_Strict):
    op: Literal["add_steps"] = "add_steps"
    steps: list[StepProposal]


class EditStep(_Strict):
    op: Literal["edit_step"] = "edit_step"
    index: int
    input: str | None = None
    title: str | None = None
    # the step's input as the commander was shown it (set by the orchestrator, never the
    # model): an edit that added to it is re-applied to an input changed meanwhile
    shown_input: str | None = None


class AbortPlan(_Strict):
    op: Literal["abort_plan"] = "abort_plan"
    reason: str


class CancelPlan(_Strict):
    op: Literal["cancel_plan"] = "cancel_plan"
    reason: str


CommanderOperation = Annotated[
    RetryStep | SkipStep | AddSteps | EditStep | AbortPlan | CancelPlan,
    Field(discriminator="op"),
]


# --- outcomes reported for a dispatched step (attempt = the dispatch attempt) -----------


class StepSucceeded(_Strict):
    index: int
    attempt: int
    summary: str
    # a fresh list by a factory: a `[]` default is deep-copied by pydantic at each build
    files: list[str] = Field(default_factory=list)
    message_ts: str | None = None


class StepFailed(_Strict):
    index: int
    attempt: int
    reason: str
    retryable: bool
    # how long the provider asked to wait before the next try (its Retry-After), if it did
    retry_after_seconds: float | None = Field(default=None, ge=0)


class StepBlocked(_Strict):
    index: int
    attempt: int
    question: str
    form: FormSpec | None = None


class StepAnswered(_Strict):
    """A user step's form, or a blocked step's answer."""

    index: int
    values: dict[str, str]
    answered_by: str
    # Optional, from the form's metadata: when given, an answer to an older attempt or
    # question round (a stale form submitted late) is ignored.
    attempt: int | None = None
    round: int | None = None


class StepCancelled(_Strict):
    """The step's run was stopped (preempted, or its process lost): requeue the step.

    A cancelled run does not count against the transient-failure cap.
    """

    index: int
    attempt: int
    reason: str = "cancelled"


Outcome = StepSucceeded | StepFailed | StepBlocked | StepAnswered | StepCancelled


# --- the stored plan: intent plus execution state (written by the orchestrator only) ----

# Limits of what Slack can show: the plan card lists every step (one line each); a
# dispatch's input is shown in one section block, whose text Slack caps at 3,000 chars.
MAX_STEPS = 50
MAX_TITLE = 150
MAX_INPUT = 3000
# tries of a step for transient failures, unless the plan was given its own
DEFAULT_MAX_TRANSIENT_FAILURES = STEP.maximum_attempts
# the commander's retry_step operations allowed on one step (then it must skip, add or abort)
MAX_COMMANDER_RETRIES = 3
USER = "user"
COMMANDER = "commander"
SUCCESSFUL: frozenset[str] = frozenset({"done", "skipped"})
TERMINAL_PLAN: frozenset[str] = frozenset({"completed", "aborted", "cancelled"})
# What only the orchestrator writes: a proposal carrying one of these is rejected by name.
RUNTIME_FIELDS: frozenset[str] = frozenset(
    {
        "status",
        "output_summary",
        "output_files",
        "failure_reason",
        "attempts",
        "retries",
        "not_before",
    }
)


class Question(_Strict):
    """What a blocked step asked a person, and (once given) the answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    text: str
    form: FormSpec | None = None
    round: int = 1  # the n-th question of this attempt (names its effects' keys)
    answer: dict[str, str] | None = None
    answered_by: str | None = None


class Step(_Strict):
    """A stored step: the model's intent plus the orchestrator's execution state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    title: str
    assignee: str
    input: str = ""
    wait_for: tuple[int, ...] = ()
    on_failure: OnFailure = "ask_commander"
    form: FormSpec | None = None
    status: StepStatus = "pending"
    output_summary: str | None = None
    output_files: tuple[str, ...] = ()
    failure_reason: str | None = None
    attempts: int = 0  # dispatches so far = the current attempt's number
    transient_failures: int = 0  # counted against the plan's max_transient_failures
    retries: int = 0  # the commander's retry_step operations, capped at MAX_COMMANDER_RETRIES
    not_before: datetime | None = None  # backoff after a transient failure
    question: Question | None = None  # set while blocked; kept (with the answer) after


class Plan(_Strict):
    """A stored plan. `steps[i]` has index `i + 1` (indexes are exactly 1..n)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    conversation_id: int
    status: PlanStatus = "running"
    max_parallel: int = 1
    max_transient_failures: int = DEFAULT_MAX_TRANSIENT_FAILURES
    version: int = 0
    request: str = ""  # the user's original message, for {{request}}
    steps: tuple[Step, ...] = ()
    # why a dispatched step still waits for a run slot (step index -> sentence, from the
    # scheduler's run requests; shown on the card, never stored with the plan)
    waits: dict[int, str] = {}

    def step(self, index: int) -> Step | None:
        return self.steps[index - 1] if 1 <= index <= len(self.steps) else None


def new_steps(proposal: PlanProposal | Sequence[StepProposal]) -> tuple[Step, ...]:
    """Validated proposals as fresh pending steps (wait_for defaulted)."""
    steps = proposal.steps if isinstance(proposal, PlanProposal) else proposal
    return tuple(
        Step(
            index=s.index,
            title=s.title,
            assignee=s.assignee,
            input=s.input,
            wait_for=tuple(dependencies(s)),
            on_failure=s.on_failure,
            form=s.form,
        )
        for s in steps
    )


def dependencies(step: StepProposal) -> list[int]:
    """`wait_for`, defaulting to the previous step (none for step 1)."""
    if step.wait_for is not None:
        return list(step.wait_for)
    return [step.index - 1] if step.index > 1 else []


Stored = TypeVar("Stored", Step, Plan)


def changed(model: Stored, changes: dict[str, Any]) -> Stored:
    """`model.model_copy(update=changes)` for a `Step` or a `Plan` (frozen, no extra fields,
    no private attributes): the same new object – the fields copied and updated without
    validation, the set fields joined with the updated ones – built in one call instead of
    pydantic's four (`model_copy`, `__copy__`, a `copy.copy` of each attribute). The
    decision copies a step and a plan several times a reconcile."""
    cls = type(model)
    new = cls.__new__(cls)
    set_on = object.__setattr__
    set_on(new, "__dict__", model.__dict__ | changes)
    set_on(new, "__pydantic_extra__", None)
    set_on(new, "__pydantic_fields_set__", model.__pydantic_fields_set__ | changes.keys())
    set_on(new, "__pydantic_private__", None)
    return new
