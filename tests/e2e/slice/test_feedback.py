"""👍/👎 on answers: Slack's feedback buttons under every answer (streamed or posted whole),
a click kept per plan, step and agent (a second click by the same person replaces the
first), audited, and shown in `/flotilla usage` and App Home; a forged value stores nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from flotilla.bot.listeners.feedback import NOT_KEPT, THANKS
from flotilla.bot.views.feedback import FEEDBACK_ACTION, RATING_ACTION_PREFIX
from flotilla.local_slack import Message
from flotilla.storage.audit import audit_trail
from flotilla.storage.feedback import feedback_of_plan
from tests.e2e.slice.conftest import Run
from tests.e2e.slice.test_admin_command import command

RESULT, NOTICE = "flotilla_result", "flotilla_notice"


def with_buttons(run: Run, root: Message) -> list[Message]:
    return [
        m
        for m in run.messages(root)
        if any(b.get("type") == "context_actions" for b in m.blocks or [])
    ]


async def click(run: Run, who: str, answer: Message, button: str) -> str:
    """Click 👍 ("positive") or 👎 ("negative"); what Flotilla answered (only to `who`)."""
    before = len(run.driver.ephemerals(who))
    await run.driver.click(who, answer, FEEDBACK_ACTION, value=button)
    await run.driver.wait_for(
        lambda: len(run.driver.ephemerals(who)) > before, what="feedback acknowledged"
    )
    return run.driver.ephemerals(who)[-1].text


async def stored(run: Run, plan_id: int) -> list[tuple[int, str, str, str]]:
    async with run.service.db.read() as conn:
        return await feedback_of_plan(conn, plan_id)


@pytest.mark.parametrize("streaming", [True, False])
async def test_feedback_on_answers_is_kept_per_plan_and_agent(
    start: Callable[..., Any], streaming: bool
) -> None:
    async with start() as run:
        if not streaming:
            run.stack.workspace.refuse("chat.startStream", "messages_tab_disabled")
        root = run.ask("research our launch numbers and write a note")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        answers = with_buttons(run, root)
        kinds = [(m.metadata or {}).get("event_type") for m in answers]
        # every answer Flotilla's own app posts (an agent's own app gets its own clicks)
        own_apps = [s for s in plan.steps if s.assignee in run.stack.agent_apps]
        assert own_apps and kinds.count(RESULT) == len(plan.steps) - len(own_apps)
        assert all(m.app_id == run.stack.commander.app_id for m in answers)
        final = [m for m in answers if (m.metadata or {}).get("event_type") == NOTICE]
        assert len(final) == (0 if plan.steps[-1].assignee == "commander" else 1)
        assert "[👍] [👎]" in run.transcript(root)

        first = answers[0]
        step = plan.step(first.metadata["event_payload"]["step"])  # type: ignore[index]
        assert step is not None
        await click(run, "maya", first, "positive")
        await click(run, "dev", answers[-1], "negative")
        await click(run, "maya", first, "negative")  # changed their mind
        assert run.driver.ephemerals("dev")[-1].text == THANKS
        maya, dev = run.driver.person("maya").id, run.driver.person("dev").id
        kept = await stored(run, plan.id)
        assert (step.index, step.assignee, maya, "bad") in kept
        assert len(kept) == 2 and {k[2] for k in kept} == {maya, dev}
        async with run.service.db.read() as conn:
            trail = [
                r
                for r in await audit_trail(conn, run.service.team_id)
                if r.action == "gave feedback"
            ]
        assert len(trail) == 3 and trail[0].details == {"agent": step.assignee, "verdict": "bad"}

        usage = await command(run, "maya", "usage")
        assert f"{step.assignee}: 0 👍, 1 👎" in usage


async def test_an_own_app_agents_answer_is_rated_under_the_commanders_answer(
    start: Callable[..., Any],
) -> None:
    """The researcher has its own Slack app: Slack would send clicks on buttons under its
    answer to that app, not to Flotilla, so its answer carries none – the commander's answer
    built on it carries a line naming it with its 👍/👎, and a click there is kept for the
    researcher's step like a click under the answer itself."""
    async with start() as run:
        root = run.ask("research our launch numbers and write a note")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        researcher = run.stack.agent_apps["researcher"]
        step = next(s for s in plan.steps if s.assignee == "researcher")
        own = [m for m in run.messages(root) if m.app_id == researcher.app_id]
        assert own and not any(m in with_buttons(run, root) for m in own)
        final = with_buttons(run, root)[-1]  # the commander's answer ends the plan
        assert final.app_id == run.stack.commander.app_id
        named = f"<@{researcher.bot_user_id}>'s answer (step {step.index})"
        assert named in str(final.blocks), final.blocks
        before = len(run.driver.ephemerals("maya"))
        await run.driver.click(
            "maya", final, f"{RATING_ACTION_PREFIX}{step.index}", value="positive"
        )
        await run.driver.wait_for(lambda: len(run.driver.ephemerals("maya")) > before)
        assert run.driver.ephemerals("maya")[-1].text == THANKS
        maya = run.driver.person("maya").id
        assert await stored(run, plan.id) == [(step.index, "researcher", maya, "good")]
        usage = await command(run, "maya", "usage")
        assert "researcher: 1 👍, 0 👎" in usage


async def test_a_forged_feedback_value_stores_nothing(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask("research our launch numbers and write a note")
        await run.quiesce()
        plan = await run.plan(root)
        answer = with_buttons(run, root)[0]
        for block in answer.blocks or []:
            if block["type"] == "context_actions":
                button = block["elements"][0]["positive_button"]
                button["value"] = f"good:{plan.id}:1:someone-else"
        said = await click(run, "maya", answer, "positive")
        assert said == NOT_KEPT and await stored(run, plan.id) == []
