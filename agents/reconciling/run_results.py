"""What a step's run returns, and how it is read back from a stored history.

`StepReport` is the structured answer a sub-agent finishes with (pydantic-ai's
`final_result` tool); `StepRunResult` is what the orchestrator gets (message, bounded
summary, files); `StepQuestion` is an open `ask_user` call of a suspended run.
`step_outcome` turns any of them, or a `RunError`, into the plan's outcome types.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart

from flotilla.agents.core.errors import PermanentError, RunError
from flotilla.agents.planning.plan import FormSpec, StepBlocked, StepFailed, StepSucceeded
from flotilla.agents.tools.builtin import ASK_USER

SUMMARY_MAX_CHARS = 500
FINAL_RESULT = "final_result"


# --- what a run returns -------------------------------------------------------------------


class StepReport(BaseModel):
    """The structured answer a sub-agent finishes with (pydantic-ai's `final_result` tool)."""

    message: str = Field(description="Your answer, posted in the thread. Markdown is fine.")
    summary: str = Field(
        default="",
        description=(
            "At most three sentences with what later steps need from your answer "
            f"(max {SUMMARY_MAX_CHARS} characters)."
        ),
    )


@dataclass(frozen=True, slots=True)
class StepRunResult:
    """A finished step: the thread message, its bounded summary, files it produced."""

    message: str
    summary: str
    files: list[str]


@dataclass(frozen=True, slots=True)
class StepQuestion:
    """The run called `ask_user`: it is suspended until `resume_step` gets the answer."""

    question: str
    form: FormSpec | None
    tool_call_id: str


def bounded_summary(summary: str, message: str, limit: int = SUMMARY_MAX_CHARS) -> str:
    """The agent's summary cut to `limit`; without one, the start of its message (deterministic)."""
    text = " ".join((summary or "").split()) or " ".join(message.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    # end on a word boundary when one is reasonably close, so the summary reads as text
    space = cut.rfind(" ")
    if space > limit * 0.6:
        cut = cut[:space]
    return cut + "…"


# --- reading a stored history ----------------------------------------------------------


def pending_question(messages: Sequence[ModelMessage]) -> StepQuestion | None:
    """The unanswered `ask_user` call that ends a suspended history, if any."""
    if not messages or not isinstance(messages[-1], ModelResponse):
        return None
    for part in messages[-1].parts:
        if isinstance(part, ToolCallPart) and part.tool_name == ASK_USER:
            args = part.args_as_dict()
            form = args.get("form")
            return StepQuestion(
                question=str(args.get("question", "")),
                form=FormSpec.model_validate(form) if form else None,
                tool_call_id=part.tool_call_id,
            )
    return None


def result_from_history(messages: Sequence[ModelMessage]) -> StepRunResult:
    """Rebuild a finished run's result from its stored history (no model call)."""
    for message in reversed(messages):
        if not isinstance(message, ModelResponse):
            continue
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_name == FINAL_RESULT:
                report = StepReport.model_validate(part.args_as_dict())
                return result_of(report, [])
        text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
        if text:
            return result_of(text, [])
    raise PermanentError("The stored run has no final answer.")


def result_of(output: StepReport | str, files: list[str]) -> StepRunResult:
    """The orchestrator's view of a run's output: a text answer gets the fallback summary."""
    if isinstance(output, StepReport):
        return StepRunResult(
            message=output.message,
            summary=bounded_summary(output.summary, output.message),
            files=list(files),
        )
    return StepRunResult(message=output, summary=bounded_summary("", output), files=list(files))


def step_outcome(
    result: StepRunResult | StepQuestion | RunError,
    *,
    index: int,
    attempt: int,
    message_ts: str | None = None,
) -> StepSucceeded | StepBlocked | StepFailed:
    """What the orchestrator records for a run's end (`message_ts` = the posted answer)."""
    if isinstance(result, StepRunResult):
        return StepSucceeded(
            index=index,
            attempt=attempt,
            summary=result.summary,
            files=result.files,
            message_ts=message_ts,
        )
    if isinstance(result, StepQuestion):
        return StepBlocked(index=index, attempt=attempt, question=result.question, form=result.form)
    return StepFailed(index=index, attempt=attempt, reason=str(result), retryable=result.retryable)
