"""The plan card tells the truth: who cancelled (once, a real mention), done apart from skipped."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from flotilla.bot.views.plan_card import CANCEL_ACTION
from flotilla.local_slack import Message
from tests.e2e.slice.conftest import Run, scripted
from tests.e2e.slice.scripts import combine, flaky, plans

CANCELLED_BY = re.compile(r"cancelled by <@([UW][A-Z0-9]+)>")


def card_of(run: Run, root: Message) -> Message:
    return next(m for m in run.messages(root) if m.text.startswith("Plan ("))


def blocks_of(card: Message) -> str:
    return json.dumps(card.blocks or [], ensure_ascii=False)


def three_steps(first_input: str, *, on_failure: str = "ask_commander") -> list[dict[str, Any]]:
    return [
        {
            "index": 1,
            "title": "Find the numbers",
            "assignee": "researcher",
            "input": first_input,
            "on_failure": on_failure,
        },
        {
            "index": 2,
            "title": "Check the numbers",
            "assignee": "analyst",
            "input": "SLOWPOKE check: {{step_1.output_summary}}",
        },
        {
            "index": 3,
            "title": "Write it up",
            "assignee": "writer",
            "input": "Write up: {{step_2.output_summary}}",
        },
    ]


async def test_a_cancelled_plan_names_who_cancelled_once(start: Callable[..., Any]) -> None:
    # step 2 fails transiently: it waits for its retry, so the plan is running when cancelled
    model = scripted(
        combine(plans({"TRUTH": three_steps("find the numbers")}), flaky("SLOWPOKE", failures=1))
    )
    async with start(model=model) as run:
        root = run.ask("TRUTH please")
        await run.says(root, "retrying (2/3)")
        assert (await run.plan(root)).status == "running"

        await run.driver.click("maya", card_of(run, root), CANCEL_ACTION)
        await run.says(root, "Plan cancelled by")
        await run.quiesce()
        plan = await run.plan(root)
        assert [s.status for s in plan.steps] == ["done", "skipped", "skipped"]

        card = card_of(run, root)
        maya = run.driver.person("maya").id
        blocks = blocks_of(card)
        shown = run.transcript(root)
        assert CANCELLED_BY.findall(blocks) == [maya], shown
        assert CANCELLED_BY.findall(card.text) == [maya], card.text
        assert "&lt;@" not in blocks and "&lt;@" not in card.text
        assert "1 of 3 done, 2 skipped" in blocks and "1 of 3 done, 2 skipped" in card.text
        # the steps say they were skipped (⏭) without repeating the reason on each line
        assert "2 ⏭ *Check the numbers*" in blocks and "3 ⏭ *Write it up*" in blocks
        sections = [b["text"]["text"] for b in card.blocks or [] if b["type"] == "section"]
        assert not [s for s in sections if "cancel" in s], sections
        assert shown.count("cancelled by @maya") == 2, shown  # the card once, the thread once
        assert "Cancel plan" not in shown


async def test_a_skipped_step_is_not_counted_as_done(start: Callable[..., Any]) -> None:
    model = scripted(plans({"OPTIONAL": three_steps("[fail] find it", on_failure="continue")}))
    async with start(model=model) as run:
        root = run.ask("OPTIONAL please")
        await run.says(root, "[offline model] writer:")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        assert [s.status for s in plan.steps] == ["skipped", "done", "done"]

        card = card_of(run, root)
        blocks = blocks_of(card)
        assert "2 of 3 done, 1 skipped" in blocks, run.transcript(root)
        assert "2 of 3 done, 1 skipped" in card.text
        assert "3/3" not in blocks and "3 of 3" not in blocks
        assert "skipped:" in blocks  # a step's own reason for skipping is still shown
