"""Issue 10's executor defects, end to end through the real Bolt app and the local workspace
(2): no step stays in progress for ever – a dispatch Slack refuses or a job that dies of a bug
fails its step once, Slack unreachable for an answer is tried again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from flotilla.agents.planning.effects import step_key
from tests.e2e.slice.faults import BrokenAnswers, Gate, gated, outbox_row, said
from tests.e2e.slice.scripts import plans

CHAIN = "research the history of our launch emails and write a short report"


def removal_plan(on_failure: str) -> list[dict[str, Any]]:
    return [
        {
            "index": 1,
            "title": "Find the numbers",
            "assignee": "researcher",
            "input": "Find the numbers",
        },
        {
            "index": 2,
            "title": "Write it up",
            "assignee": "writer",
            "input": "Write up: {{step_1.output_summary}}",
            "on_failure": on_failure,
        },
        {
            "index": 3,
            "title": "Sum up",
            "assignee": "commander",
            "input": "Sum up the findings: {{step_1.output_summary}}",
            "wait_for": [2],
        },
    ]


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
        {
            "index": 1,
            "title": "Find the numbers",
            "assignee": "researcher",
            "input": "Find the numbers",
            "on_failure": on_failure,
        },
        {
            "index": 2,
            "title": "Write it up",
            "assignee": "writer",
            "input": "Write up: {{step_1.output_summary}}",
        },
    ]
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
        # the events of the thread so far (Flotilla's own posts come back to its app) are
        # delivered first: a stop cancels a delivery under way, which then never settles
        await run.driver.deliveries_settled()
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
