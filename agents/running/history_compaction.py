"""A run's context kept bounded: long tool results older than the last few messages are
cut, deterministically and pairing-safe (pydantic-ai's `ProcessHistory` capability runs it
before each model request; what it returns is also what `agents/running/session.py` stores)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelRequestPart, ToolReturnPart

KEEP_RECENT_MESSAGES = 6
COMPACT_ABOVE_CHARS = 4000
COMPACT_KEEP_CHARS = 600


def compact_history(messages: list[ModelMessage]) -> list[ModelMessage]:
    """Bound the context: long tool results older than the last few messages are cut.

    Deterministic and pairing-safe (every tool call keeps its return, only the return's
    text shrinks), so the compacted history is valid for any provider and is what gets
    stored. Recent messages stay whole: the model still sees what it is working on.
    """
    cutoff = len(messages) - KEEP_RECENT_MESSAGES
    compacted: list[ModelMessage] = []
    for position, message in enumerate(messages):
        if position >= cutoff or not isinstance(message, ModelRequest):
            compacted.append(message)
            continue
        parts = [_compact_part(part) for part in message.parts]
        changed = any(new is not old for new, old in zip(parts, message.parts, strict=True))
        compacted.append(replace(message, parts=parts) if changed else message)
    return compacted


def _compact_part(part: ModelRequestPart) -> ModelRequestPart:
    # exact type: special returns (tool search, capability loading) carry structured content
    if type(part) is not ToolReturnPart:
        return part
    text = part.model_response_str()
    if len(text) <= COMPACT_ABOVE_CHARS:
        return part
    elided = len(text) - COMPACT_KEEP_CHARS
    short = f"{text[:COMPACT_KEEP_CHARS]} … [compacted: {elided} characters elided]"
    compacted: ToolReturnPart[Any] = part
    return replace(compacted, content=short)
