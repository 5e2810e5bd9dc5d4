"""An operator can follow a plan in the log: one INFO line per plan started, step
dispatched, step outcome, form answered and plan finished, each with the ids to find it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from flotilla.bot.views.forms import SUBMIT_ACTION
from tests.e2e.slice.conftest import REQUEST

IDS = ("team", "channel", "thread_ts", "plan")


async def test_a_plan_is_told_in_the_log_with_its_ids(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flotilla.agents")
    caplog.set_level(logging.INFO, logger="flotilla.bot")
    async with start() as run:
        root = run.ask(REQUEST)
        form = await run.says(root, "needs your input")
        await run.driver.click("maya", form, SUBMIT_ACTION, values={"field:tiers": "Pro"})
        await run.says(root, "[offline model] commander:")
        await run.quiesce()
        plan = await run.plan(root)
    lines = [r for r in caplog.records if all(hasattr(r, name) for name in IDS)]
    said = [r.getMessage() for r in lines]
    assert said[0] == "plan started"
    assert "step dispatched to a person" in said
    assert "step dispatched to researcher" in said
    assert "form answered" in said
    assert "step outcome: succeeded" in said
    assert said[-1] == "plan finished: completed"
    for record in lines:
        fields = vars(record)
        assert fields["plan"] == plan.id and fields["thread_ts"] == root.ts
        assert fields["channel"] == root.channel and fields["team"]
    steps = [r for r in lines if r.getMessage().startswith(("step", "form"))]
    assert all(hasattr(r, "step") and hasattr(r, "attempt") for r in steps)
