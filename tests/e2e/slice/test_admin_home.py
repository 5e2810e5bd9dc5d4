"""App Home end to end: agents, active plans with links to their threads, usage this month per
agent and per channel, and (for admins) the audit trail; published on `app_home_opened`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tests.e2e.slice.conftest import REQUEST, Run
from tests.e2e.slice.test_admin_command import command


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
