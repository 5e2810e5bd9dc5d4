"""The thread's agent session status: processing while a run is in flight, suspended while
the plan waits for a person, closed when it ends – driven by the plan's step statuses, shown
on the card as well, visible before the commander's first turn ends, and the older status
line where a workspace has no agent sessions (remembered)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.running import offline
from flotilla.bot.views.forms import SUBMIT_ACTION
from flotilla.local_slack import Message
from flotilla.local_slack.web_agent_sessions import session_of
from flotilla.local_slack.web_assistant import live_statuses
from flotilla.storage.slack_fallbacks import fallbacks_of
from tests.e2e.slice.conftest import REQUEST, Run
from tests.e2e.slice.faults import WAIT, card_of
from tests.e2e.slice.scripts import tools_of


def history(run: Run, root: Message) -> list[str]:
    session = session_of(
        run.stack.workspace.state, root.channel, root.ts, run.stack.commander.app_id
    )
    return list(session.history) if session is not None else []


async def answer_the_form(run: Run, form: Message) -> None:
    await run.driver.click(
        "maya", form, SUBMIT_ACTION, values={"field:tiers": "Pro", "field:notes": "annual discount"}
    )


async def test_the_session_status_follows_the_plan_through_a_form(
    start: Callable[..., Any],
) -> None:
    async with start() as run:
        root = run.ask(REQUEST)
        form = await run.says(root, "needs your input")
        await run.quiesce()
        assert history(run, root)[0] == "processing"
        assert history(run, root)[-1] == "suspended"  # the plan waits for maya's answer
        assert "waiting for a person" in card_of(run, root).text + str(card_of(run, root).blocks)
        session = session_of(
            run.stack.workspace.state, root.channel, root.ts, run.stack.commander.app_id
        )
        assert session is not None and session.initiator == run.driver.person("maya").id
        assert session.title.startswith("compare our pricing")

        await answer_the_form(run, form)
        await run.says(root, "[offline model] commander:", from_="Flotilla")
        await run.quiesce()
        assert (await run.plan(root)).status == "completed"
        seen = history(run, root)
        assert seen[-1] == "closed"
        waited = seen.index("suspended")
        assert "processing" in seen[waited:]  # working again after the answer
        assert all(a != b for a, b in zip(seen, seen[1:], strict=False))  # sent on change only
        calls = [n for n, o in run.stack.workspace.api_log if n == "agents.sessions.setStatus"]
        assert len(calls) == len(seen)
        assert "working" not in str(card_of(run, root).blocks)  # a finished card says no more


async def test_the_first_sign_of_work_comes_before_the_commanders_turn_ends(
    start: Callable[..., Any],
) -> None:
    planning, release = asyncio.Event(), asyncio.Event()

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if "create_plan" in tools_of(info):
            planning.set()
            await release.wait()  # the commander is still thinking
        return offline.respond(messages, info)

    async with start(model=FunctionModel(respond)) as run:
        root = run.ask(REQUEST)
        await asyncio.wait_for(planning.wait(), WAIT)
        await run.stack.workspace.state.wait_for(lambda: history(run, root) != [], WAIT)
        assert history(run, root) == ["processing"]
        assert run.messages(root)[1:] == []  # nothing posted yet: the status is the first sign
        release.set()
        await run.says(root, "needs your input")


async def test_without_agent_sessions_the_status_line_is_used_and_remembered(
    start: Callable[..., Any],
) -> None:
    async with start() as run:
        ws = run.stack.workspace
        ws.refuse("agents.sessions.setStatus", "feature_disabled")
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        await run.quiesce()
        lines = [s for c, t, s in live_statuses(ws.state, ws.clock()) if t == root.ts]
        assert [s.status for s in lines] == ["is waiting for a person…"]
        tried = [o for n, o in ws.api_log if n == "agents.sessions.setStatus"]
        assert tried == ["feature_disabled"]  # asked once, then remembered
        assert [o for n, o in ws.api_log if n == "assistant.threads.setStatus"].count("ok") >= 2
        async with run.service.db.read() as conn:
            assert "agent_sessions" in await fallbacks_of(conn, run.service.team_id)
