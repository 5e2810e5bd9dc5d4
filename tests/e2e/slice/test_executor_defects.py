"""Issue 10's executor defects, end to end through the real Bolt app and the local workspace:
cancel stops work (1), no step stays in progress for ever (2), other apps cannot silence
Flotilla (5)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agents import offline
from agents.effects import finished_key, question_key, result_key, step_key, stopped_key
from bot.listeners.payloads import DISPATCH_EVENT, FORM_EVENT, NOTICE_EVENT, RESULT_EVENT
from bot.views.forms import INLINE_ACTION
from bot.views.plan_card import CANCEL_ACTION
from storage.db import Database
from tests.e2e.slice.conftest import REQUEST, Run
from tests.e2e.slice.faults import (
    WAIT,
    BrokenAnswers,
    FirstPostsFail,
    Gate,
    LostAnswer,
    after,
    card_of,
    gated,
    impersonate,
    outbox_row,
    posted,
    said,
)
from tests.e2e.slice.scripts import plans, tools_of
from tests.e2e.slice.test_admin_command import command

CHAIN = "research the history of our launch emails and write a short report"


# --- 1. cancel stops work ------------------------------------------------------------------


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
    from bot.service import SlackService

    writer = Gate("Write up the findings")
    async with start(model=gated(writer), heartbeat_seconds=0.05) as run:
        root = run.ask(CHAIN)
        await writer.reached()
        first = run.service
        await first.executor.abandon()  # this process still serves Slack, runs nothing
        second = SlackService(
            first.db, first.client, api_url=run.stack.workspace.api_url, cipher=first.cipher,
            options=first.options, clock=run.clock, model=gated(writer),
        )  # fmt: skip
        await second.start()
        try:
            writer.started.clear()
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
        {"index": 1, "title": "Find the numbers", "assignee": "researcher",
         "input": "[fail] Find the numbers", "on_failure": "abort_plan", "wait_for": []},
        {"index": 2, "title": "Draft the note", "assignee": "writer",
         "input": "Draft the note", "wait_for": []},
        {"index": 3, "title": "Sum up", "assignee": "commander",
         "input": "Sum up: {{step_2.output_summary}}", "wait_for": [1, 2]},
    ]  # fmt: skip
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
        {"index": 1, "title": "Find the numbers", "assignee": "researcher",
         "input": "[ask] Find the numbers", "wait_for": []},
        {"index": 2, "title": "Check the sources", "assignee": "analyst",
         "input": "[fail] Check the sources", "on_failure": "abort_plan", "wait_for": []},
    ]  # fmt: skip
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


# --- 2. no step stays in progress for ever ------------------------------------------------


def removal_plan(on_failure: str) -> list[dict[str, Any]]:
    return [
        {"index": 1, "title": "Find the numbers", "assignee": "researcher",
         "input": "Find the numbers"},
        {"index": 2, "title": "Write it up", "assignee": "writer",
         "input": "Write up: {{step_1.output_summary}}", "on_failure": on_failure},
        {"index": 3, "title": "Sum up", "assignee": "commander",
         "input": "Sum up the findings: {{step_1.output_summary}}", "wait_for": [2]},
    ]  # fmt: skip


@pytest.mark.parametrize("on_failure", ["abort_plan", "continue"])
async def test_a_dispatch_slack_refuses_fails_its_step(
    start: Callable[..., Any], on_failure: str
) -> None:
    researcher, commander = Gate("Find the numbers"), Gate("Sum up the findings")
    model = gated(researcher, commander, script=plans({"REMOVED": removal_plan(on_failure)}))
    async with start(model=model) as run:
        root = run.ask("REMOVED please")
        await researcher.reached()
        # someone removes Flotilla from the channel while the researcher works
        channel = run.stack.workspace.state.channels[run.stack.channel.id]
        channel.members.remove(run.stack.commander.bot_user_id)
        researcher.release.set()
        if on_failure == "continue":
            await commander.reached()  # the plan went on past the step it could not post
            run.stack.workspace.invite(channel, run.stack.commander)
            commander.release.set()
        await run.quiesce()

        plan = await run.plan(root)
        writer = plan.steps[1]
        reason = writer.failure_reason or ""
        assert reason.startswith("I could not post in this thread: I am not in this channel")
        assert "Traceback" not in reason and "not_in_channel" not in reason  # a sentence
        assert await outbox_row(run, step_key(plan.id, 2, 1)) == ("failed", 1)  # given up
        assert not [m for m in run.messages(root) if m.text.startswith("@writer")]
        if on_failure == "abort_plan":
            assert plan.status == "aborted"
            assert [s.status for s in plan.steps] == ["done", "failed", "skipped"]
        else:
            assert plan.status == "completed", run.transcript(root)
            assert [s.status for s in plan.steps] == ["done", "skipped", "done"]
            await run.says(root, "[offline model] commander:")


async def test_an_agents_app_removed_from_the_channel_is_named_in_the_reason(
    start: Callable[..., Any],
) -> None:
    steps = removal_plan("continue")
    steps[0]["on_failure"] = "abort_plan"
    researcher = Gate("Find the numbers")
    async with start(model=gated(researcher, script=plans({"GONE": steps}))) as run:
        root = run.ask("GONE please")
        await researcher.reached()
        channel = run.stack.workspace.state.channels[run.stack.channel.id]
        channel.members.remove(run.stack.agent_apps["researcher"].bot_user_id)
        researcher.release.set()
        notice = await run.says(root, "The plan was stopped")
        await run.quiesce()
        reason = (await run.plan(root)).steps[0].failure_reason or ""
        # the agent's own app was removed, not Flotilla: the sentence says whose app it is
        assert reason.startswith("its answer could not be posted: the Researcher app is"), reason
        assert "I am not in this channel" not in notice.text


@pytest.mark.parametrize("on_failure", ["abort_plan", "continue"])
async def test_a_job_that_dies_of_a_bug_fails_its_step_once(
    start: Callable[..., Any], on_failure: str
) -> None:
    steps = [
        {"index": 1, "title": "Find the numbers", "assignee": "researcher",
         "input": "Find the numbers", "on_failure": on_failure},
        {"index": 2, "title": "Write it up", "assignee": "writer",
         "input": "Write up: {{step_1.output_summary}}"},
    ]  # fmt: skip
    researcher = Gate("Find the numbers")
    researcher.release.set()  # only counts the runs
    async with start(model=gated(researcher, script=plans({"BUG": steps}))) as run:
        broken = BrokenAnswers(run.service.port, "researcher")
        broken.install(run)
        root = run.ask("BUG please")
        if on_failure == "abort_plan":
            notice = await run.says(root, "The plan was stopped")
            assert "an internal error stopped this step" in notice.text
        else:
            await run.says(root, "[offline model] writer:")
        await run.quiesce()
        plan = await run.plan(root)
        first = plan.steps[0]
        assert (first.failure_reason or "").startswith("an internal error stopped this step")
        assert "RuntimeError" not in run.transcript(root)  # a sentence, never a traceback
        expected = "aborted" if on_failure == "abort_plan" else "completed"
        assert plan.status == expected, run.transcript(root)
        assert first.status == ("failed" if on_failure == "abort_plan" else "skipped")

        # the job is over: its row is settled, and nothing runs the step again later
        assert await outbox_row(run, step_key(plan.id, 1, 1)) == ("sent", 1)
        run.clock.advance(180)
        run.service.wake()
        await run.quiesce()
        assert await outbox_row(run, step_key(plan.id, 1, 1)) == ("sent", 1)
        assert researcher.calls == 1
        assert (await run.plan(root)).steps[0].status == first.status


async def test_slack_unreachable_for_the_answer_is_tried_again_not_failed(
    start: Callable[..., Any],
) -> None:
    researcher = Gate("Research this and list the key findings")
    async with start(model=gated(researcher)) as run:
        ws = run.stack.workspace
        root = run.ask(CHAIN)
        await researcher.reached()
        port = int(ws.base_url.rstrip("/").rsplit(":", 1)[1])
        await ws.stop()  # Slack cannot be reached when the answer is ready
        researcher.release.set()
        await run.service.settle()
        plan = await run.plan(root)
        assert plan.steps[0].status == "in_progress", plan.steps[0].failure_reason

        await ws.start("127.0.0.1", port)  # Slack is back
        run.clock.advance(60)
        run.service.wake()
        await run.says(root, "[offline model] commander:")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        assert [s.attempts for s in plan.steps] == [1, 1, 1]
        assert said(run, root, "[offline model] researcher:") == 1
        assert researcher.calls == 1  # the stored run answered again, at no cost


# --- 5. other apps cannot silence Flotilla ----------------------------------------------


async def test_other_apps_and_people_cannot_silence_flotilla(
    start: Callable[..., Any], empty_db: Database
) -> None:
    researcher = Gate("Research this and list the key findings")
    async with start(db=empty_db, model=gated(researcher)) as run:
        ws = run.stack.workspace
        impostor = ws.install_app("Impostor", scopes=["chat:write"], bot_events=[])
        ws.invite(run.stack.channel, impostor)
        root = run.ask(CHAIN)
        await researcher.reached()  # step 1 in flight: its dispatch is in the thread
        plan = await run.plan(root)
        p = plan.id
        keys = [
            (DISPATCH_EVENT, step_key(p, 2, 1)),
            (FORM_EVENT, question_key(p, 1, 1, 1)),
            (NOTICE_EVENT, finished_key(p)),
        ] + [(RESULT_EVENT, result_key(p, step, 1)) for step in (1, 2, 3)]
        await impersonate(run, root, impostor.bot_token, keys)  # the very keys Flotilla will use
        # a person's message carrying a result key (e.g. copied by a script) counts neither
        person = run.driver.post("dev", "launch", "my own result", thread_ts=root.ts)
        person.metadata = {"event_type": RESULT_EVENT,
                           "event_payload": {"key": result_key(p, 1, 1)}}  # fmt: skip
        conversation = await run.service.find_conversation(root.channel, root.ts)
        assert conversation is not None
        port = run.service.port
        for _, key in keys:
            assert not await port.thread_has_key(conversation, key, agent="researcher"), key
        assert await port.thread_has_key(conversation, step_key(p, 1, 1))  # Flotilla's own

        # Flotilla stops mid-step without settling; the next process redelivers it all
        await run.stack.restart(model=offline.offline_model())
        resumed = Run(run.stack, run.driver, run.clock)
        await resumed.says(root, "[offline model] commander:")
        await resumed.quiesce()

        plan = await resumed.plan(root)
        assert plan.status == "completed", resumed.transcript(root)
        assert [s.attempts for s in plan.steps] == [1, 1, 1]
        ours = [m for m in resumed.messages(root) if m.bot_id != impostor.bot_id]
        dispatches = [
            (m.metadata or {}).get("event_payload", {}).get("step")
            for m in ours
            if (m.metadata or {}).get("event_type") == DISPATCH_EVENT
        ]
        assert dispatches == [1, 2]
        texts = [m.text for m in ours]
        for prefix in ("[offline model] researcher:", "[offline model] writer:",
                       "[offline model] commander:"):  # fmt: skip
            assert sum(t.startswith(prefix) for t in texts) == 1, (prefix, texts)


async def test_a_redelivered_dispatch_and_form_are_not_silenced(
    start: Callable[..., Any],
) -> None:
    async with start() as run:
        ws = run.stack.workspace
        impostor = ws.install_app("Impostor", scopes=["chat:write"], bot_events=[])
        ws.invite(run.stack.channel, impostor)
        port = FirstPostsFail(run.service.port)
        port.install(run)
        root = run.ask(f"[ask] {CHAIN}")
        await run.says(root, "Plan (")  # the card: the plan exists, its dispatch is due
        plan = await run.plan(root)
        p = plan.id
        await port.failure(step_key(p, 1, 1))  # the dispatch's first post is failing
        await impersonate(run, root, impostor.bot_token, [
            (DISPATCH_EVENT, step_key(p, 1, 1)),
            (FORM_EVENT, question_key(p, 1, 1, 1)),
            (RESULT_EVENT, result_key(p, 1, 1)),
        ])  # fmt: skip
        dev = run.driver.post("dev", "launch", "copied", thread_ts=root.ts)
        dev.metadata = {"event_type": FORM_EVENT,
                        "event_payload": {"key": question_key(p, 1, 1, 1)}}  # fmt: skip

        port.go.set()
        await asyncio.wait_for(port.raised.wait(), WAIT)
        run.clock.advance(5)  # past the outbox's backoff: delivered again, the thread checked
        run.service.wake()
        await run.driver.wait_for(
            lambda: posted(run, root, impostor.bot_id, DISPATCH_EVENT, step_key(p, 1, 1)),
            what="the dispatch, delivered again",
        )
        await port.failure(question_key(p, 1, 1, 1))  # the question's first post failed
        run.clock.advance(5)
        run.service.wake()
        question = await run.says(root, "asks:", from_="Flotilla")
        await run.driver.click("maya", question, INLINE_ACTION, value="2024 only")
        await run.says(root, "[offline model] commander:")
        await run.quiesce()

        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        bot = impostor.bot_id
        assert posted(run, root, bot, DISPATCH_EVENT, step_key(p, 1, 1)) == 1
        assert posted(run, root, bot, FORM_EVENT, question_key(p, 1, 1, 1)) == 1
        assert posted(run, root, bot, RESULT_EVENT, result_key(p, 1, 1)) == 1
        assert said(run, root, "[offline model] researcher:") == 1
