"""A run's stored history: its JSON form (`agent_runs.messages`) and where a run resumed
from it continues (`resumable`, `text_answer`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)

OUTPUT_TOOL = "final_result"  # pydantic-ai's output tool (`final_result`, `final_result_<T>`)


def resumable(messages: list[ModelMessage]) -> list[ModelMessage]:
    """A history to continue a run from: without a last request that only returns the
    output tool's result. pydantic-ai appends that request when a run ends; a run whose
    close could not store it (the database went away, or the process died) would send it
    to the model as a new turn and pay for a second answer. Without it, the run goes on
    from the response that carries its answer and ends without a model call."""
    last = messages[-1] if messages else None
    if (
        len(messages) >= 2
        and isinstance(last, ModelRequest)
        and isinstance(messages[-2], ModelResponse)
        and last.parts
        and all(
            isinstance(p, ToolReturnPart) and p.tool_name.startswith(OUTPUT_TOOL)
            for p in last.parts
        )
    ):
        return messages[:-1]
    return messages


def text_answer(messages: Sequence[ModelMessage]) -> str | None:
    """The answer a history ends with when its last message is a model response in words
    only (no tool call): a run resumed there is over – every Flotilla agent takes text as
    its output – and must not ask the model again (pydantic-ai would send the history,
    instructions and all, as a new request)."""
    last = messages[-1] if messages else None
    if not isinstance(last, ModelResponse) or any(isinstance(p, ToolCallPart) for p in last.parts):
        return None
    text = "".join(p.content for p in last.parts if isinstance(p, TextPart))
    return text or None


def dump_messages(messages: Sequence[ModelMessage]) -> list[Any]:
    """A JSON-safe form of a message history, for `agent_runs.messages`."""
    return list(ModelMessagesTypeAdapter.dump_python(list(messages), mode="json"))


def load_messages(data: list[Any]) -> list[ModelMessage]:
    return list(ModelMessagesTypeAdapter.validate_python(data))
