"""`/flotilla` end to end: each subcommand through the real Bolt app and the local workspace,
answers ephemeral, admins only where it changes something, every change audited."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tests.e2e.slice.conftest import REQUEST, Run


async def command(run: Run, who: str, text: str) -> str:
    """Run `/flotilla text` as `who` in #launch; the ephemeral answer's text."""
    before = len(run.driver.ephemerals(who))
    delivery = await run.driver.slash_command(who, "launch", "/flotilla", text)
    assert delivery.attempts and delivery.attempts[-1].status == 200
    await run.driver.wait_for(
        lambda: len(run.driver.ephemerals(who)) > before, what=f"an answer to /flotilla {text}"
    )
    answers = run.driver.ephemerals(who)
    assert len(answers) == before + 1, [a.text for a in answers[before:]]
    return answers[-1].text


def channel_texts(run: Run) -> list[str]:
    """What everyone in #launch sees (top-level messages and thread replies)."""
    channel = run.stack.channel.id
    return [m.text for m in run.stack.workspace.state.messages.get(channel, {}).values()]


def user_id(run: Run, who: str) -> str:
    return run.driver.person(who).id


async def test_help_and_anything_unknown_or_malformed_answer_with_help(
    start: Callable[..., Any],
) -> None:
    async with start() as run:
        for text in (
            "",
            "help",
            "frobnicate",
            "agent edit",
            "agent add a b",
            "cancel soon",
            "agents please",
            "agent fly writer",
        ):
            answer = await command(run, "maya", text)
            assert "`/flotilla agents`" in answer and "`/flotilla usage`" in answer, text
        assert "I don't know `/flotilla frobnicate`" in await command(run, "maya", "frobnicate")
        assert "Say which agent" in await command(run, "dev", "agent disable")
        assert "`soon` is not a plan number" in await command(run, "dev", "cancel soon")
        assert not any("/flotilla" in t for t in channel_texts(run))  # all of it ephemeral
        assert run.driver.ephemerals("dev") and not run.driver.ephemerals("alex")


async def test_agents_and_plans_are_listed_for_everyone(start: Callable[..., Any]) -> None:
    async with start() as run:
        agents = await command(run, "maya", "agents")
        assert "*researcher*" in agents and "own Slack app" in agents
        assert "*writer*" in agents and "persona" in agents and "*analyst*" in agents
        assert await command(run, "maya", "plans") == "No plans are running."

        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        plan = await run.plan(root)
        plans = await command(run, "dev", "plans")
        link = f"/archives/{root.channel}/p{root.ts.replace('.', '')}|thread>"
        assert f"plan {plan.id} – paused" in plans and link in plans
        assert plans.count("• plan") == 1


async def test_people_who_are_not_admins_are_refused(start: Callable[..., Any]) -> None:
    async with start() as run:
        for text in (
            "agent add scout",
            "agent edit writer",
            "agent disable writer",
            "agent remove writer",
            "agent enable writer",
            "audit",
        ):
            answer = await command(run, "maya", text)
            assert answer.startswith("Sorry, only workspace admins"), (text, answer)
        assert run.stack.workspace.state.top_modal(user_id(run, "maya")) is None
        writer = await run.service.agent("writer")
        assert writer is not None and writer.enabled
        assert {a.name for a in await admin_agents(run)} == {"researcher", "analyst", "writer"}


async def admin_agents(run: Run) -> list[Any]:
    from flotilla.bot import admin_reports

    return await admin_reports.agents(run.service)


async def test_allow_listed_people_may_administer(start: Callable[..., Any]) -> None:
    async with start() as run:
        # people's ids are made when the workspace starts: put maya on the list then
        allowed = frozenset({user_id(run, "maya")})
        run.service.options = replace(run.service.options, admin_user_ids=allowed)
        assert await command(run, "maya", "agent disable analyst") == "*analyst* is disabled."
        assert "Sorry" in await command(run, "dev", "agent enable analyst")


async def test_enable_disable_and_remove_are_audited(start: Callable[..., Any]) -> None:
    async with start() as run:
        assert await command(run, "alex", "agent disable analyst") == "*analyst* is disabled."
        assert "*analyst* _(disabled)_" in await command(run, "maya", "agents")
        assert await command(run, "alex", "agent enable analyst") == "*analyst* is enabled."
        assert "*analyst* _(disabled)_" not in await command(run, "maya", "agents")
        assert await command(run, "alex", "agent remove analyst") == "*analyst* is removed."
        assert "*analyst*" not in await command(run, "maya", "agents")
        missing = await command(run, "alex", "agent disable analyst")
        assert "There is no agent named analyst" in missing
        assert "There is no agent named ghost" in await command(run, "alex", "agent remove ghost")

        trail = await command(run, "alex", "audit")
        alex = user_id(run, "alex")
        lines = [line for line in trail.splitlines() if line.startswith("•")]
        assert [line.split("> ", 1)[1] for line in lines] == [
            "agent.remove analyst",
            "agent.enable analyst",
            "agent.disable analyst",
        ]
        assert all(f"<@{alex}>" in line and " UTC – " in line for line in lines)


async def test_cancel_by_requester_or_admin_and_audited(start: Callable[..., Any]) -> None:
    async with start() as run:
        assert "No plan is running in this channel" in await command(run, "alex", "cancel")
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        plan = await run.plan(root)
        refusal = await command(run, "dev", "cancel")
        maya = user_id(run, "maya")
        assert refusal == f"Only <@{maya}> or a workspace admin can cancel this plan."
        assert "Plan 99 is not running" in await command(run, "alex", "cancel 99")
        assert await command(run, "alex", f"cancel {plan.id}") == f"Plan {plan.id} is cancelled."
        await run.says(root, "Plan cancelled by")
        await run.quiesce()
        assert (await run.plan(root)).status == "cancelled"
        assert f"plan.cancel plan {plan.id}" in await command(run, "alex", "audit")
        assert f"Plan {plan.id} is not running" in await command(run, "alex", f"cancel {plan.id}")


async def test_usage_this_month_per_agent_and_channel(start: Callable[..., Any]) -> None:
    async with start() as run:
        assert "nothing yet" in await command(run, "alex", "usage")
        root = run.ask("research the history of our launch emails and write a short report")
        await run.says(root, "[offline model]", from_="Writer")
        await run.quiesce()
        usage = await command(run, "maya", "usage")  # not a change: everyone may see it
        head, rest = usage.split("\n", 1)
        assert head == f"*Usage since {run.clock():%Y-%m}-01*"
        per_agent, per_channel = rest.split("*Per channel*")
        assert "• researcher – " in per_agent and "• writer – " in per_agent
        assert " tokens (" in per_agent
        assert f"• <#{run.stack.channel.id}> – " in per_channel
