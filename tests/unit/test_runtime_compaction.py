"""Context compaction: long old tool results shrink, pairs stay whole, recent turns untouched."""

from __future__ import annotations

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from flotilla.agents.running.history_compaction import (
    COMPACT_ABOVE_CHARS,
    KEEP_RECENT_MESSAGES,
    compact_history,
)


def turn(i: int, size: int) -> list[ModelMessage]:
    return [
        ModelResponse(parts=[ToolCallPart("fetch", {"i": i}, tool_call_id=f"c{i}")]),
        ModelRequest(parts=[ToolReturnPart("fetch", "y" * size, tool_call_id=f"c{i}")]),
    ]


def test_old_long_tool_results_are_cut_and_recent_ones_kept() -> None:
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("task")])]
    for i in range(6):
        history += turn(i, COMPACT_ABOVE_CHARS * 3)
    compacted = compact_history(history)

    assert len(compacted) == len(history)
    returns = [p for m in compacted for p in m.parts if isinstance(p, ToolReturnPart)]
    calls = [p for m in compacted for p in m.parts if isinstance(p, ToolCallPart)]
    assert [r.tool_call_id for r in returns] == [c.tool_call_id for c in calls]  # pairs intact
    old = len(history) - KEEP_RECENT_MESSAGES
    for position, message in enumerate(compacted):
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                cut = "[compacted:" in str(part.content)
                assert cut is (position < old)
    assert compacted[0] is history[0]
    assert compact_history(compacted) == compacted  # idempotent


def test_short_histories_are_unchanged() -> None:
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("task")]), *turn(1, 10)]
    assert compact_history(history) == history
