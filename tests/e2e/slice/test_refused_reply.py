"""A commander reply Slack refuses for good (the channel archived while the commander
thought) is an operator's warning in one line, not a crash with a traceback; the work is
settled, never retried in a loop."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo
from sqlalchemy import select

from flotilla.agents.running.offline import first_prompt
from flotilla.storage.outbox import outbox_t
from tests.e2e.slice.conftest import scripted
from tests.e2e.slice.scripts import text, tools_of


def chat(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
    """The commander answers in words, without a plan, when asked to CHAT."""
    if "create_plan" in tools_of(info) and "CHAT" in first_prompt(messages):
        return text("Happy to chat.")
    return None


@pytest.mark.parametrize("error", ["is_archived", "channel_not_found"])
async def test_a_reply_slack_refuses_is_a_warning_not_a_crash(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture, error: str
) -> None:
    caplog.set_level(logging.INFO)
    async with start(model=scripted(chat)) as run:
        run.stack.workspace.refuse("chat.postMessage", error)
        root = run.ask("CHAT with me")
        await run.quiesce()
        async with run.service.db.read() as conn:
            states = (await conn.execute(select(outbox_t.c.state))).scalars().all()
        assert "Happy to chat." not in run.transcript(root)  # Slack refused it
    assert states and "pending" not in states  # the turn is settled, not taken again
    crashes = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not crashes, [r.getMessage() for r in crashes]
    warned = [r.getMessage() for r in caplog.records if "failed for good" in r.getMessage()]
    assert len(warned) == 1 and "Traceback" not in warned[0], warned
