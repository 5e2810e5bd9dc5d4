"""A restart in the middle of a step: the run continues; nothing finished runs again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.running import offline
from flotilla.agents.running.offline import first_prompt
from flotilla.storage.agents import list_agents, remove_agent
from tests.e2e.slice.conftest import Run
from tests.e2e.slice.scripts import tools_of


async def test_a_step_in_flight_resumes_after_a_restart(start: Callable[..., Any]) -> None:
    started = asyncio.Event()

    async def hangs_in_the_writer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if "create_plan" not in tools_of(info) and first_prompt(messages).startswith(
            "Write up the findings"
        ):
            started.set()
            await asyncio.Event().wait()  # the process dies while the model thinks
        return offline.respond(messages, info)

    async with start(model=FunctionModel(hangs_in_the_writer)) as run:
        root = run.ask("research the history of our launch emails and write a short report")
        await run.says(root, "@writer")
        await asyncio.wait_for(started.wait(), 20)
        before = await run.plan(root)
        assert [s.status for s in before.steps] == ["done", "in_progress", "pending"]

        await run.stack.restart(model=offline.offline_model())
        resumed = Run(run.stack, run.driver, run.clock)
        await resumed.says(root, "[offline model] commander:")
        await resumed.quiesce()

        plan = await resumed.plan(root)
        assert plan.status == "completed", resumed.transcript(root)
        assert [s.attempts for s in plan.steps] == [1, 1, 1]  # nothing re-dispatched
        assert resumed.dispatches(root) == [(1, 1), (2, 1)]
        texts = [m.text for m in resumed.messages(root)]
        assert sum(t.startswith("[offline model] researcher:") for t in texts) == 1
        assert sum(t.startswith("[offline model] writer:") for t in texts) == 1


async def test_default_agents_are_seeded_once(start: Callable[..., Any]) -> None:

    async with start() as run:
        service = run.service
        async with service.db.read() as conn:
            names = [a.name for a in await list_agents(conn, service.team_id)]
        assert names == ["analyst", "researcher", "writer"]
        async with service.db.write() as conn:
            for name in names:
                await remove_agent(conn, service.team_id, name)
        service = await run.stack.restart()
        async with service.db.read() as conn:
            assert await list_agents(conn, service.team_id) == []  # removed stays removed


async def test_a_second_replica_never_runs_a_step_another_is_running(
    start: Callable[..., Any],
) -> None:
    from flotilla.bot.service import SlackService

    started, release = asyncio.Event(), asyncio.Event()

    async def slow_writer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if "create_plan" not in tools_of(info) and first_prompt(messages).startswith(
            "Write up the findings"
        ):
            started.set()
            await release.wait()  # the first replica's model is still thinking
        return offline.respond(messages, info)

    async with start(model=FunctionModel(slow_writer)) as run:
        root = run.ask("research the history of our launch emails and write a short report")
        await asyncio.wait_for(started.wait(), 20)
        first = run.service
        second = SlackService(
            first.db,
            first.client,
            api_url=run.stack.workspace.api_url,
            cipher=first.cipher,
            options=first.options,
            clock=run.clock,
            model=offline.offline_model(),
        )
        await second.start()  # its recovery finds the writer's step in progress...
        await second.settle()
        texts = [m.text for m in run.messages(root)]
        assert not any(t.startswith("[offline model] writer:") for t in texts)  # ...leased

        release.set()
        await run.says(root, "[offline model] commander:")
        await run.quiesce()
        await second.settle()
        await second.stop()
        plan = await run.plan(root)
        assert plan.status == "completed"
        assert [s.attempts for s in plan.steps] == [1, 1, 1]
        texts = [m.text for m in run.messages(root)]
        assert sum(t.startswith("[offline model] writer:") for t in texts) == 1


async def test_a_commander_turn_cut_by_a_restart_is_not_lost(start: Callable[..., Any]) -> None:
    thinking = asyncio.Event()

    async def slow_planner(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if "create_plan" in tools_of(info):
            thinking.set()
            await asyncio.Event().wait()  # the process stops while the commander thinks
        return offline.respond(messages, info)

    async with start(model=FunctionModel(slow_planner)) as run:
        root = run.ask("research the history of our launch emails and write a short report")
        await asyncio.wait_for(thinking.wait(), 20)
        assert len(run.messages(root)) == 1  # nothing answered yet

        await run.stack.restart(model=offline.offline_model())
        resumed = Run(run.stack, run.driver, run.clock)
        await resumed.says(root, "[offline model] commander:")
        await resumed.quiesce()
        plan = await resumed.plan(root)
        assert plan.status == "completed"
        texts = [m.text for m in resumed.messages(root)]
        assert sum("I wrote a plan" in t for t in texts) == 1
        assert sum(t.startswith("Plan (3 steps)") for t in texts) == 1
