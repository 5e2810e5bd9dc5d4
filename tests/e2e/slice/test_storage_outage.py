"""A database outage in the middle of a plan, end to end (the real Bolt app over HTTP, a
throw-away PostgreSQL server that is stopped while a step's model answers): the thread
hears once that storage is the trouble, nothing is spent of the step's attempts, the
model's answer is not paid for again, and the plan completes once the database is back; a
mention sent during the outage is refused (Slack sends it again) and answered once after."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.core.failures import PUBLIC_STORAGE
from flotilla.agents.running import offline
from flotilla.agents.running.offline import first_prompt
from flotilla.agents.running.streamed_function import streamed
from flotilla.storage.db import Database
from tests.e2e.slice.scripts import tools_of
from tests.e2e.slice.test_inbox import mentions
from tests.throwaway_postgres import ThrowawayPostgres

REQUEST = "research the history of our launch emails and write a short report"


@pytest.fixture
async def server() -> AsyncIterator[ThrowawayPostgres]:
    pg = ThrowawayPostgres()
    try:
        await pg.start()
        yield pg
    finally:
        pg.remove()


@pytest.mark.parametrize("streaming", [False, True], ids=["posted", "streamed"])
async def test_an_outage_during_a_step_is_said_once_and_paid_once(
    start: Callable[..., Any], server: ThrowawayPostgres, streaming: bool
) -> None:
    calls: dict[str, int] = {}
    stopped = False

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal stopped
        if "create_plan" not in tools_of(info):  # a step's agent
            prompt = first_prompt(messages)
            calls[prompt] = calls.get(prompt, 0) + 1
            if not stopped:
                stopped = True
                await server.stop()  # the database goes away while the model answers
        return offline.respond(messages, info)

    db = Database(server.url)
    try:
        # streamed: showing the answer as it comes must not cut the model's answer short
        scripted = (
            FunctionModel(model, stream_function=streamed(model))
            if streaming
            else FunctionModel(model)
        )
        async with start(db=db, model=scripted) as run:
            root = run.ask(REQUEST)
            await run.says(root, PUBLIC_STORAGE, from_="Flotilla")
            await server.start()  # back
            # the step's lease runs out (the process could not hand it over): taken again
            run.clock.advance(run.service.options.lease_seconds + 1)
            run.service.wake()
            await run.says(root, "[offline model] commander:")
            await run.quiesce()
            texts = [m.text for m in run.messages(root)]
            assert sum(PUBLIC_STORAGE in t for t in texts) == 1
            assert not any("could not complete in time" in t for t in texts)
            plan = await run.plan(root)
            assert plan.status == "completed"
            assert [s.attempts for s in plan.steps] == [1] * len(plan.steps)
            assert all(n == 1 for n in calls.values()), calls  # no model call paid twice
    finally:
        await db.dispose()


async def test_a_mention_sent_while_the_database_is_down_is_answered_once_it_is_back(
    start: Callable[..., Any], server: ThrowawayPostgres
) -> None:
    db = Database(server.url)
    try:
        async with start(db=db, retry_delays=(0.0, 3.0, 6.0, 10.0)) as run:
            await run.quiesce()
            await server.stop()
            root = run.ask("what time zone is the launch in?")
            deliveries = run.stack.workspace.events.deliveries

            def refused() -> bool:  # a 500, or no answer within Slack's window: sent again
                return any(d.attempts and d.attempts[0].status != 200 for d in mentions(deliveries))

            await run.driver.wait_for(refused, what="the mention refused during the outage")
            await server.start()
            await run.says(root, "[offline model]", from_="Flotilla")
            await run.quiesce()
            answers = [m for m in run.messages(root) if m.text.startswith("[offline model]")]
            assert len(answers) == 1  # stored once (on a retry), answered once
            (delivery,) = mentions(deliveries)
            assert delivery.acked and delivery.attempts[0].status != 200
    finally:
        await db.dispose()
