"""Scripted model behaviour for end-to-end tests (everything else is the offline model)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai.exceptions import ModelHTTPError, ModelUnavailableError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo

from flotilla.agents.running.offline import first_prompt

Script = Callable[[list[ModelMessage], AgentInfo], ModelResponse | None]


def answered(messages: list[ModelMessage]) -> bool:
    """The last request carries tool results (the model's call was executed)."""
    last = messages[-1] if messages else None
    return isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts)


def tools_of(info: AgentInfo) -> set[str]:
    return {t.name for t in info.function_tools}


def call(name: str, args: dict[str, Any]) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args)], model_name="scripted")


def text(words: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(words)], model_name="scripted")


def plans(by_keyword: dict[str, list[dict[str, Any]]]) -> Script:
    """The commander writes the given plan when its request contains the keyword."""

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
        if "create_plan" not in tools_of(info):
            return None
        prompt = first_prompt(messages)
        for keyword, steps in by_keyword.items():
            if keyword in prompt:
                if answered(messages):
                    return text(f"Plan written ({len(steps)} steps).")
                return call("create_plan", {"steps": steps})
        return None

    return script


def flaky(marker: str, failures: int) -> Script:
    """A step whose input contains `marker` fails with HTTP 503 its first `failures` runs."""
    seen = {"count": 0}

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
        tools = tools_of(info)
        if "create_plan" in tools or "retry_step" in tools or answered(messages):
            return None
        if marker in first_prompt(messages) and seen["count"] < failures:
            seen["count"] += 1
            raise ModelHTTPError.for_category(
                ModelUnavailableError,
                status_code=503,
                model_name="scripted",
                body={"error": "overloaded"},
            )
        return None

    return script


def steer(on_message: str, respond: Callable[[], list[ModelResponse]]) -> Script:
    """Woken by a person's message containing `on_message`, the commander answers so."""
    replies: list[ModelResponse] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
        if "retry_step" not in tools_of(info) or on_message not in first_prompt(messages):
            return None
        if not answered(messages):
            replies[:] = respond()
        return replies.pop(0) if replies else text("Done.")

    return script


def combine(*scripts: Script) -> Script:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
        for each in scripts:
            found = each(messages, info)
            if found is not None:
                return found
        return None

    return script
