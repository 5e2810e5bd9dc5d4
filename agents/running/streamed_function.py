"""A function model's answers as a stream: the same response, sent in small chunks.

The offline model (and scripted test models) answer a request whole; `streamed` turns such
a function into pydantic-ai's stream function, so a run that streams (see
`agents/running/answer_text.py`) sees text and tool-call arguments arrive piece by piece, as from a
real provider.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls

CHUNK_CHARS = 24
Respond = Callable[[list[ModelMessage], AgentInfo], Any]


def chunks(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """`text` in pieces of at most `size` characters (at least one piece)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def streamed(
    respond: Respond,
) -> Callable[[list[ModelMessage], AgentInfo], AsyncIterator[str | DeltaToolCalls]]:
    """The stream function answering like `respond`, chunk by chunk."""

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        response = respond(messages, info)
        if inspect.isawaitable(response):
            response = await response
        assert isinstance(response, ModelResponse)
        for index, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                for piece in chunks(part.content):
                    yield piece
            elif isinstance(part, ToolCallPart):
                pieces = chunks(part.args_as_json_str())
                yield {
                    index: DeltaToolCall(part.tool_name, pieces[0], tool_call_id=part.tool_call_id)
                }
                for piece in pieces[1:]:
                    yield {index: DeltaToolCall(json_args=piece)}

    return stream
