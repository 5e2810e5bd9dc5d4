"""The answer a model is writing, read from its streamed response as it grows.

A step's answer arrives either as plain text or as the `message` argument of the output
tool (`final_result…`), whose JSON grows chunk by chunk; `pydantic_core` reads the partial
JSON. What is shown while streaming is only a preview: the answer posted in the end (and the
summary later steps get) is always the validated result of the run.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any

from pydantic_ai.messages import (
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_core import from_json

ShowText = Callable[[str], Awaitable[None]]
OUTPUT_TOOL_PREFIX = "final_result"


def can_stream(model: Model) -> bool:
    """Whether `model` answers streamed requests (a function model needs a stream function)."""
    while isinstance(model, WrapperModel):
        model = model.wrapped
    return not (isinstance(model, FunctionModel) and model.stream_function is None)


def message_of(args: str) -> str:
    """The `message` argument of an output tool call's (possibly unfinished) JSON."""
    try:
        parsed = from_json(args, allow_partial="trailing-strings")
    except ValueError:
        return ""
    message = parsed.get("message") if isinstance(parsed, dict) else None
    return message if isinstance(message, str) else ""


class AnswerText:
    """The answer so far of one streamed model response."""

    def __init__(self) -> None:
        self.texts: dict[int, str] = {}
        self.outputs: dict[int, str] = {}  # part index -> output tool arguments so far

    def take(self, event: Any) -> bool:
        """Read one stream event; True when the answer's text may have changed."""
        if isinstance(event, PartStartEvent):
            part = event.part
            if isinstance(part, TextPart):
                self.texts[event.index] = part.content
                return True
            if isinstance(part, ToolCallPart) and part.tool_name.startswith(OUTPUT_TOOL_PREFIX):
                self.outputs[event.index] = part.args if isinstance(part.args, str) else ""
                return True
        elif isinstance(event, PartDeltaEvent):
            delta = event.delta
            if isinstance(delta, TextPartDelta) and event.index in self.texts:
                self.texts[event.index] += delta.content_delta
                return True
            if (
                isinstance(delta, ToolCallPartDelta)
                and event.index in self.outputs
                and isinstance(delta.args_delta, str)
            ):
                self.outputs[event.index] += delta.args_delta
                return True
        return False

    @property
    def text(self) -> str:
        for args in self.outputs.values():
            return message_of(args)  # the output tool's message is the answer
        return "".join(self.texts[i] for i in sorted(self.texts))


async def relay(events: AsyncIterable[Any], show: ShowText) -> None:
    """Pass the answer's text to `show` each time it grows (a whole stream, read to its end)."""
    answer, shown = AnswerText(), ""
    async for event in events:
        if answer.take(event):
            text = answer.text
            if text and text != shown:
                shown = text
                await show(text)
