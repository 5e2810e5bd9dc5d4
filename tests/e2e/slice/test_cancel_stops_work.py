"""Issue 10's executor defects, end to end through the real Bolt app and the local workspace
(1): a cancel or an abort stops the work in flight – in this process or another, the commander's
answer, open questions – and a notice or card whose answer was lost is said once.

(2) is in test_no_step_stays_in_progress.py, (5) in test_other_apps_cannot_silence_flotilla.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.planning.effects import stopped_key
from flotilla.agents.running import offline
from flotilla.bot.views.plan_card import CANCEL_ACTION
from flotilla.storage.db import Database
from tests.e2e.slice.conftest import REQUEST, Run
from tests.e2e.slice.faults import (
    WAIT,
    Gate,
    LostAnswer,
    after,
    card_of,
    gated,
    outbox_row,
    said,
)
from tests.e2e.slice.scripts import plans, tools_of
from tests.e2e.slice.test_admin_command import command

CHAIN = "research the history of our launch emails and write a short report"


@pytest.mark.parametrize("how", ["card", "command"])
async def test_cancel_stops_the_step_in_flight(
    start: Callable[..., Any], empty_db: Database, how: str
) -> None:
    writer = Gate("Write up the findings")
    async with start(db=empty_db, model=gated(writer)) as run:
        root = run.ask(CHAIN)
        await writer.reached()  # the writer's model is thinking
        maya = run.driver.person("maya").id
        if how == "card":
            await run.driver.click("maya", card_of(run, root), CANCEL_ACTION)
        else:
            plan = await run.plan(root)
            assert await command(run, "maya", "cancel") == f"Plan {plan.id} is cancelled."
        notice = await run.says(root, f"Plan cancelled by <@{maya}>; nothing else will run")
        assert "what finished is kept: step 1 (" in notice.text  # one sentence: what is kept
        assert writer.cancelled  # the run was stopped, not left to finish

        writer.release.set()  # a model that answers late must change nothing
        await run.quiesce()
        assert after(run, root, notice) == [], run.transcript(root)
        assert said(run, root, "[offline model] writer:") == 0
        assert said(run, root, "[offline model] commander:") == 0
        plan = await run.plan(root)
        assert plan.status == "cancelled"
        assert [s.status for s in plan.steps] == ["done", "skipped", "skipped"]
        assert writer.calls == 1  # nobody ran the step again


async def test_a_cancel_stops_the_step_running_in_another_process(
    start: Callable[..., Any],
) -> None:
    from flotilla.bot.service import SlackService

    writer = Gate("Write up the findings")
    async with start(model=gated(writer), heartbeat_seconds=0.05) as run:
        root = run.ask(CHAIN)
        await writer.reached()
        first = run.service
        await first.executor.abandon()  # this process still serves Slack, runs nothing
        second = SlackService(
            first.db,
            first.client,
            api_url=run.stack.workspace.api_url,
            cipher=first.cipher,
            options=first.options,
            clock=run.clock,
            model=gated(writer),
        )
        await second.start()
        try:
            # the abandon cancelled the first process's run at the gate: forget that too, or
            # `cut` below would not wait for the second process's heartbeat
            writer.started.clear()
            writer.stopped.clear()
            run.clock.advance(first.executor.context.options.lease.total_seconds() + 1)
            second.wake()  # the first process's lease is over: the second runs the writer
            await writer.reached()

            await run.driver.click("maya", card_of(run, root), CANCEL_ACTION)  # to the first
            await writer.cut()  # the second process's heartbeat saw the plan cancelled...
            plan = await run.plan(root)  # ...before anyone delivered the cancel's notice
            assert (await outbox_row(run, stopped_key(plan.id)))[0] == "pending"
            writer.release.set()
            second.wake()
            notice = await run.says(root, "Plan cancelled by")
            await second.settle()
            assert after(run, root, notice) == [], run.transcript(root)
            assert said(run, root, "[offline model] writer:") == 0
            assert (await run.plan(root)).status == "cancelled"
        finally:
            await second.stop()


async def test_a_cancel_cuts_the_commanders_answer_to_a_message_in_flight(
    start: Callable[..., Any],
) -> None:
    writer = Gate("Write up the findings")
    steering = asyncio.Event()
    answer = asyncio.Event()

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1 and writer.holds(messages, info):
            await writer.wait()
        if len(messages) == 1 and "retry_step" in tools_of(info):  # a person's message
            steering.set()
            await answer.wait()
        return offline.respond(messages, info)

    async with start(model=FunctionModel(respond, model_name="scripted")) as run:
        root = run.ask(CHAIN)
        await writer.reached()
        run.driver.post("dev", "launch", "also mention the pricing page", thread_ts=root.ts)
        await asyncio.wait_for(steering.wait(), WAIT)  # the commander is thinking about it
        await run.driver.click("maya", card_of(run, root), CANCEL_ACTION)
        notice = await run.says(root, "Plan cancelled by")

        answer.set()
        writer.release.set()
        await run.quiesce()
        assert after(run, root, notice) == [], run.transcript(root)  # no "Noted; …"
        assert (await run.plan(root)).status == "cancelled"


async def test_a_cancel_notice_whose_answer_was_lost_is_said_once(
    start: Callable[..., Any],
) -> None:
    async with start() as run:
        port = LostAnswer(run.service.port, "Plan cancelled")
        port.install(run)
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        await run.driver.click("maya", card_of(run, root), CANCEL_ACTION)
        await asyncio.wait_for(port.lost.wait(), WAIT)
        run.clock.advance(5)  # past the outbox's backoff: the notice is delivered again
        run.service.wake()
        await run.quiesce()
        notices = [m for m in run.messages(root) if m.text.startswith("Plan cancelled")]
        assert len(notices) == 1, run.transcript(root)
        assert (await run.plan(root)).status == "cancelled"


async def test_a_plan_card_whose_answer_was_lost_is_posted_once(
    start: Callable[..., Any],
) -> None:
    async with start() as run:
        port = LostAnswer(run.service.port, "Plan (")
        port.install(run)
        root = run.ask(CHAIN)
        await asyncio.wait_for(port.lost.wait(), WAIT)
        run.clock.advance(5)  # past the outbox's backoff: the dispatch is delivered again
        run.service.wake()
        await run.says(root, "[offline model] commander:")
        await run.quiesce()
        cards = [m for m in run.messages(root) if m.text.startswith("Plan (")]
        assert len(cards) == 1, run.transcript(root)
        assert "completed" in cards[0].text  # the one card is the one kept up to date


async def test_a_step_cancelled_after_its_process_died_is_not_run_again(
    start: Callable[..., Any],
) -> None:
    synthesis = Gate("Post the final answer")
    async with start(model=gated(synthesis)) as run:
        root = run.ask(CHAIN)
        await synthesis.reached()  # the commander is writing the synthesis...
        await run.service.executor.abandon()  # ...when its process is killed (kill -9)
        await run.stack.restart(model=gated(synthesis))
        resumed = Run(run.stack, run.driver, run.clock)
        await run.driver.click("maya", card_of(resumed, root), CANCEL_ACTION)
        notice = await resumed.says(root, "Plan cancelled by")

        synthesis.release.set()
        run.clock.advance(resumed.service.executor.context.options.lease.total_seconds() + 1)
        resumed.service.wake()  # the dead process's lease is over: its row comes due
        await resumed.quiesce()
        assert synthesis.calls == 1  # the cancelled step's model is not paid for again
        assert after(resumed, root, notice) == [], resumed.transcript(root)
        assert (await resumed.plan(root)).status == "cancelled"


async def test_an_abort_stops_the_parallel_step_in_flight(start: Callable[..., Any]) -> None:
    steps = [
        {
            "index": 1,
            "title": "Find the numbers",
            "assignee": "researcher",
            "input": "[fail] Find the numbers",
            "on_failure": "abort_plan",
            "wait_for": [],
        },
        {
            "index": 2,
            "title": "Draft the note",
            "assignee": "writer",
            "input": "Draft the note",
            "wait_for": [],
        },
        {
            "index": 3,
            "title": "Sum up",
            "assignee": "commander",
            "input": "Sum up: {{step_2.output_summary}}",
            "wait_for": [1, 2],
        },
    ]
    writer = Gate("Draft the note")
    failing = Gate("[fail] Find the numbers")

    async def fail_once_the_writer_thinks(
        messages: list[ModelMessage], info: AgentInfo
    ) -> ModelResponse:
        if len(messages) == 1 and failing.holds(messages, info):
            await writer.reached()  # both steps are in flight when the first one fails
        if len(messages) == 1 and writer.holds(messages, info):
            await writer.wait()
        return plans({"PARALLEL": steps})(messages, info) or offline.respond(messages, info)

    model = FunctionModel(fail_once_the_writer_thinks, model_name="scripted")
    async with start(model=model, max_parallel=2) as run:
        root = run.ask("PARALLEL please")
        notice = await run.says(root, "The plan was stopped")
        assert writer.cancelled

        writer.release.set()
        await run.quiesce()
        assert after(run, root, notice) == [], run.transcript(root)
        assert said(run, root, "[offline model] writer:") == 0
        plan = await run.plan(root)
        assert plan.status == "aborted"
        assert [s.status for s in plan.steps] == ["failed", "skipped", "skipped"]


async def test_a_cancel_closes_an_agents_open_question(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask(f"[ask] {CHAIN}")
        question = await run.says(root, "asks:")
        assert any(b.get("type") == "input" for b in question.blocks or [])
        await run.driver.click("maya", card_of(run, root), CANCEL_ACTION)
        await run.says(root, "Plan cancelled by")
        await run.quiesce()

        closed = next(m for m in run.messages(root) if m.ts == question.ts)
        assert "The plan was cancelled" in closed.text
        assert "This form is closed" in closed.text
        kinds = {b.get("type") for b in closed.blocks or []}
        assert not kinds & {"actions", "input"}, closed.blocks  # nothing left to answer
        plan = await run.plan(root)
        assert plan.status == "cancelled"
        assert said(run, root, "[offline model] researcher:") == 0


async def test_an_abort_closes_an_agents_open_question(start: Callable[..., Any]) -> None:
    steps = [
        {
            "index": 1,
            "title": "Find the numbers",
            "assignee": "researcher",
            "input": "[ask] Find the numbers",
            "wait_for": [],
        },
        {
            "index": 2,
            "title": "Check the sources",
            "assignee": "analyst",
            "input": "[fail] Check the sources",
            "on_failure": "abort_plan",
            "wait_for": [],
        },
    ]
    failing = Gate("[fail] Check the sources")  # fails once the question is out
    async with start(model=gated(failing, script=plans({"ASKED": steps})), max_parallel=2) as run:
        root = run.ask("ASKED please")
        question = await run.says(root, "asks:")
        failing.release.set()
        await run.says(root, "The plan was stopped")
        await run.quiesce()

        closed = next(m for m in run.messages(root) if m.ts == question.ts)
        assert "The plan was stopped" in closed.text and "This form is closed" in closed.text
        kinds = {b.get("type") for b in closed.blocks or []}
        assert not kinds & {"actions", "input"}, closed.blocks
        plan = await run.plan(root)
        assert plan.status == "aborted"
        assert [s.status for s in plan.steps] == ["skipped", "failed"]


async def test_a_step_cancelled_before_its_handed_dispatch_is_performed_is_not_dispatched(
    start: Callable[..., Any], empty_db: Database
) -> None:
    """Step 1's outcome is reconciled and step 2's dispatch handed to this process's sender
    (no claim); the plan is cancelled before the sender performs it. The dispatch takes no
    plan it remembers from before the cancel: nothing is posted and nothing runs."""
    from flotilla.agents.planning.effects import PostDispatch
    from flotilla.agents.reconciling.outbox import Claimed
    from flotilla.bot.handlers import cancel_plan

    async with start(db=empty_db) as run:
        sender = run.service.executor.outbox
        perform = sender.perform
        handed: list[bool] = []

        async def cancelled_first(claimed: Claimed) -> bool:
            effect = claimed.effect
            if isinstance(effect, PostDispatch) and effect.step == 2 and not handed:
                handed.append(claimed.handed and claimed.delivery == 1)
                refused = await cancel_plan(
                    run.service,
                    plan_id=effect.plan_id,
                    user=run.driver.person("maya").id,
                    channel=root.channel,
                    thread_ts=root.ts,
                )
                assert refused is None
            performed: bool = await perform(claimed)
            return performed

        sender.perform = cancelled_first
        root = run.ask(CHAIN)
        await run.says(root, "Plan cancelled by")
        await run.quiesce()
        assert handed == [True]  # decided by this process's reconcile a moment before
        plan = await run.plan(root)
        assert plan.status == "cancelled"
        assert [s.status for s in plan.steps] == ["done", "skipped", "skipped"]
        assert run.dispatches(root) == [(1, 1)], run.transcript(root)
        assert said(run, root, "[offline model] writer:") == 0
