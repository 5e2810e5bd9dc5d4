"""Counting a plan's Web API calls the way `bench/live.py` does: by method, a streamed
message (start, appends, stop) as one call, the status calls left out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.running import offline
from flotilla.agents.running.streamed_function import streamed
from flotilla.agents.tools.files import WRITE_FILE

STATUS_CALLS = frozenset({"agents.sessions.setStatus", "assistant.threads.setStatus"})
STREAM_REST = frozenset({"chat.appendStream", "chat.stopStream"})  # a stream counts at its start
LEFT_OUT = STATUS_CALLS | STREAM_REST


def counted_calls(api_log: Iterable[tuple[str, str]]) -> Counter[str]:
    """The counted calls of a workspace's API log (method -> how many), failed ones too."""
    return Counter(method for method, _outcome in api_log if method not in LEFT_OUT)


def per_step(calls: Counter[str], steps: int) -> float:
    return sum(calls.values()) / steps


def walkthrough_model() -> FunctionModel:
    """The offline model, but its writer answers in the thread without attaching a file, as
    the walkthrough shows it (the writer is not offered `write_file`)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        tools = [t for t in info.function_tools if t.name != WRITE_FILE]
        return offline.respond(messages, replace(info, function_tools=tools))

    return FunctionModel(respond, stream_function=streamed(respond), model_name="walkthrough")
