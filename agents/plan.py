"""Plan models and pure DAG logic.

CONTRACT: the names and shapes in this first section are imported by the runtime and
commander (agents/runtime.py, agents/commander.py) and by the Slack layer (bot/), which
are being written in parallel. Add to them; do not rename or reshape them.
Pure logic below has no I/O, no clock and no randomness: time comes in as parameters.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.errors import PlanValidationError

OnFailure = Literal["abort_plan", "continue", "ask_commander"]
StepStatus = Literal["pending", "in_progress", "done", "failed", "skipped", "blocked"]
PlanStatus = Literal["running", "paused", "completed", "aborted", "cancelled"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FormField(_Strict):
    name: str  # machine key, [a-z][a-z0-9_]{0,39}
    label: str  # shown to the person (<= 2000 chars, Slack's label limit)
    kind: Literal["text", "long_text", "select"] = "text"
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


def validate_plan(proposal: PlanProposal, *, assignees: Collection[str]) -> PlanProposal:
    """Return the normalised proposal (wait_for filled in) or raise PlanValidationError.

    `assignees` = names of enabled sub-agents ("user" and "commander" are always allowed).
    One actionable sentence per problem. A proposal carrying runtime fields (status,
    output_summary, …) is rejected with a sentence saying the orchestrator sets those.
    """
    raise PlanValidationError(["validate_plan is being implemented (issue 3)"])


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
    files: list[str] = []
    message_ts: str | None = None


class StepFailed(_Strict):
    index: int
    attempt: int
    reason: str
    retryable: bool


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


Outcome = StepSucceeded | StepFailed | StepBlocked | StepAnswered
