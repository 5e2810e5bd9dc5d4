"""Disabling or removing an agent that a running plan waits for: its pending steps fail with
a clear reason, and each step's on_failure policy applies (the commander decides)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flotilla.bot.views.forms import SUBMIT_ACTION
from flotilla.storage.db import Database
from flotilla.storage.runs import load_run
from tests.e2e.slice.conftest import REQUEST, Run, scripted
from tests.e2e.slice.scripts import plans
from tests.e2e.slice.test_admin_command import command, user_id


def addressed(run: Run, root: Any, agent: str) -> list[Any]:
    return [m for m in run.messages(root) if m.text.startswith(f"@{agent} ")]


async def answer_the_form(run: Run, root: Any) -> None:
    form = await run.says(root, "needs your input")
    await run.driver.click("maya", form, SUBMIT_ACTION, values={"field:tiers": "Pro"})
    await run.says(root, "Answered by")


async def test_disabling_the_writer_mid_plan_fails_its_step(
    start: Callable[..., Any], empty_db: Database
) -> None:
    async with start(db=empty_db) as run:  # on a SQLite file and on PostgreSQL
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        answer = await command(run, "alex", "agent disable writer")
        assert answer == (
            "*writer* is disabled. 1 pending step(s) in 1 plan(s) failed with that reason."
        )
        alex = user_id(run, "alex")
        reason = f"the agent writer was disabled by <@{alex}>"
        await run.says(root, f"Step 4 will not run: {reason}.")

        await answer_the_form(run, root)
        await run.says(root, "[offline model] commander:", from_="Flotilla")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        statuses = [s.status for s in plan.steps]
        assert statuses == ["done", "done", "done", "skipped", "done"]
        # on_failure ask_commander: the commander was told why and skipped the step
        assert "skipped by the commander" in (plan.steps[3].failure_reason or "")
        assert not addressed(run, root, "writer")  # never dispatched to the disabled agent
        async with run.service.db.read() as conn:
            runs = await load_run(conn, f"commander:plan:{plan.id}:step:4:attempt:0:failed")
        assert runs is not None and reason in str(runs.messages)


async def test_removing_an_agent_fails_its_steps_under_abort_plan(
    start: Callable[..., Any],
) -> None:
    steps = [
        {"index": 1, "title": "Ask", "assignee": "user", "input": "Which market?"},
        {
            "index": 2,
            "title": "Analyse",
            "assignee": "analyst",
            "input": "Look at it",
            "wait_for": [1],
            "on_failure": "abort_plan",
        },
    ]
    async with start(model=scripted(plans({"MARKET": steps}))) as run:
        root = run.ask("MARKET please")
        await run.says(root, "needs your input")
        answer = await command(run, "alex", "agent remove analyst")
        assert answer.startswith("*analyst* is removed. 1 pending step(s)")
        await run.says(root, "The plan was stopped: step 2 failed (the agent analyst was removed")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "aborted"
        assert plan.steps[1].status == "failed"  # (abort_plan leaves the open form as it is)
        assert plan.steps[1].failure_reason == (
            f"the agent analyst was removed by <@{user_id(run, 'alex')}>"
        )
        assert not addressed(run, root, "analyst")


async def test_an_agent_no_plan_waits_for_changes_no_thread(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        before = len(run.messages(root))
        assert await command(run, "alex", "agent disable researcher") == "*researcher* is disabled."
        await run.quiesce()
        assert len(run.messages(root)) == before
        assert (await run.plan(root)).status == "paused"
