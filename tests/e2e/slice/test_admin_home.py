"""App Home end to end: agents, active plans with links to their threads, usage this month per
agent and per channel, and (for admins) the audit trail; published on `app_home_opened`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from flotilla.bot.views.admin import ADD_AGENT_ACTION
from tests.e2e.slice.conftest import REQUEST, Run
from tests.e2e.slice.test_admin_command import command
from tests.e2e.slice.test_admin_modal import GOOD


async def home_text(run: Run, who: str) -> str:
    """Open the App Home tab as `who`; the text of the view published for this opening."""
    app = run.stack.commander
    before = run.driver.home(who, app)
    old_hash = before.hash if before is not None else None
    run.driver.open_app_home(who, app)

    def published() -> bool:
        view = run.driver.home(who, app)
        return view is not None and view.hash != old_hash

    await run.driver.wait_for(published, what=f"App Home published for {who}")
    view = run.driver.home(who, app)
    assert view is not None
    return "\n".join(_texts(view.spec["blocks"]))


def _texts(blocks: list[dict[str, Any]]) -> list[str]:
    out = []
    for block in blocks:
        if "text" in block:
            out.append(block["text"]["text"])
        for element in block.get("elements", []):
            if isinstance(element, dict) and "text" in element:
                out.append(str(element["text"]))
    return out


async def test_home_shows_agents_plans_usage_and_audit(start: Callable[..., Any]) -> None:
    async with start() as run:
        done = run.ask("research the history of our launch emails and write a short report")
        await run.says(done, "[offline model]", from_="Writer")
        await run.quiesce()
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        plan = await run.plan(root)
        await command(run, "alex", "agent disable analyst")

        home = await home_text(run, "alex")
        assert "*Agents*" in home and "*researcher*" in home and "*analyst* _(disabled)_" in home
        link = f"/archives/{root.channel}/p{root.ts.replace('.', '')}|thread> in <#{root.channel}>"
        assert f"plan {plan.id} – paused – " in home and link in home
        assert f"*Usage since {run.clock():%Y-%m}-01*" in home
        per_agent, per_channel = home.split("*Per agent*")[1].split("*Per channel*")
        assert "• researcher – " in per_agent and "• writer – " in per_agent
        assert f"• <#{run.stack.channel.id}> – " in per_channel
        assert "*Audit trail*" in home and "agent.disable analyst" in home

        maya_home = await home_text(run, "maya")
        assert "*analyst* _(disabled)_" in maya_home and link in maya_home
        assert "Audit trail" not in maya_home  # the audit trail is for admins


async def test_home_is_refreshed_when_opened_again(start: Callable[..., Any]) -> None:
    async with start() as run:
        first = await home_text(run, "maya")
        assert "No plans are running." in first and "nothing yet" in first
        assert "_(disabled)_" not in first
        await command(run, "alex", "agent disable writer")
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        again = await home_text(run, "maya")
        assert "*writer* _(disabled)_" in again and "– paused – " in again
        view = run.driver.home("maya", run.stack.commander)
        assert view is not None and len(json.dumps(view.spec)) < 50_000
        published = view.hash
        # the Messages tab is not the home tab: nothing is published for it
        run.driver.open_app_home("maya", run.stack.commander, tab="messages")
        await run.quiesce()
        assert view.hash == published


async def test_admins_add_an_agent_from_home(start: Callable[..., Any]) -> None:
    async with start() as run:
        app = run.stack.commander
        await home_text(run, "maya")
        maya_home = run.driver.home("maya", app)
        assert maya_home is not None and ADD_AGENT_ACTION not in json.dumps(maya_home.spec)
        # a forged click from someone who is not an admin opens nothing
        maya = run.driver.person("maya")
        click = {
            "type": "button",
            "action_id": ADD_AGENT_ACTION,
            "block_id": "b",
            "text": {"type": "plain_text", "text": "Add an agent"},
            "action_ts": "1.0",
        }
        await run.stack.workspace.interactivity.view_action(maya, app, maya_home, click)

        await home_text(run, "alex")
        alex_home = run.driver.home("alex", app)
        assert alex_home is not None
        element, block_id = next(
            (e, b["block_id"])
            for b in alex_home.spec["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
        )
        assert element["action_id"] == ADD_AGENT_ACTION
        alex = run.driver.person("alex")
        await run.stack.workspace.interactivity.view_action(
            alex, app, alex_home, click | {"block_id": block_id}
        )
        await run.modal("alex")
        assert run.driver.open_view("alex").spec["callback_id"] == "flotilla_agent_save"
        # maya clicked first, and alex's modal is open: hers was refused, not just slower
        assert run.stack.workspace.state.top_modal(maya.id) is None
        outcome = await run.driver.submit("alex", GOOD)
        assert outcome.view is None, outcome.errors
        assert await run.service.agent("scout") is not None
        assert "*scout*" in await home_text(run, "alex")  # the home shows it when opened again
