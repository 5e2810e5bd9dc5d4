"""The plan as Slack's native plan display: one streamed message (task_display_mode "plan")
whose tasks follow the steps' statuses as the orchestrator sets them – pending, in progress,
waiting for a person, complete – and which stops when the plan ends; the card stays (its
Cancel button) and shows the end. A workspace without it keeps the card alone (remembered)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flotilla.bot.views.forms import SUBMIT_ACTION
from flotilla.local_slack import Message
from flotilla.storage.slack_fallbacks import fallbacks_of
from tests.e2e.slice.conftest import REQUEST, Run
from tests.e2e.slice.faults import card_of


def display(run: Run, root: Message) -> Message:
    shown = [m for m in run.messages(root) if m.task_display_mode == "plan"]
    assert len(shown) == 1, run.transcript(root)
    return shown[0]


def statuses(message: Message) -> list[str]:
    return [str(task["status"]) for task in message.tasks.values()]


async def test_the_native_plan_display_follows_the_step_statuses(
    start: Callable[..., Any],
) -> None:
    async with start(native_plan_display=True) as run:
        root = run.ask(REQUEST)
        form = await run.says(root, "needs your input")
        await run.quiesce()
        shown = display(run, root)
        plan = await run.plan(root)
        assert shown.streaming and shown.plan_title == "Plan (5 steps)"
        assert list(shown.tasks) == [f"step-{s.index}" for s in plan.steps]
        # the tasks say what the stored steps say, nothing else
        assert [s.status for s in plan.steps] == [
            "done",
            "done",
            "in_progress",
            "pending",
            "pending",
        ]
        assert statuses(shown) == ["complete", "complete", "in_progress", "pending", "pending"]
        card = card_of(run, root)
        assert card.ts < shown.ts and "Cancel plan" in str(card.blocks)
        appends = [o for n, o in run.stack.workspace.api_log if n == "chat.appendStream"]
        assert appends and set(appends) == {"ok"}

        await run.driver.click(
            "maya", form, SUBMIT_ACTION, values={"field:tiers": "Pro", "field:notes": "annual"}
        )
        await run.says(root, "[offline model] commander:", from_="Flotilla")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed"
        shown = display(run, root)
        assert not shown.streaming and statuses(shown) == ["complete"] * 5
        assert (shown.metadata or {})["event_payload"]["key"] == f"plan:{plan.id}:tasks"
        assert "5 ✅" in run.transcript(root) and "Cancel plan" not in str(
            card_of(run, root).blocks
        )


async def test_without_a_native_display_the_card_shows_the_plan_alone(
    start: Callable[..., Any],
) -> None:
    async with start(native_plan_display=True) as run:
        run.stack.workspace.refuse("chat.startStream", "messages_tab_disabled")
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        await run.quiesce()
        assert [m for m in run.messages(root) if m.task_display_mode] == []
        card = card_of(run, root)
        assert "waiting for a person" in str(card.blocks)  # the card kept up to date
        async with run.service.db.read() as conn:
            assert "task_display" in await fallbacks_of(conn, run.service.team_id)
