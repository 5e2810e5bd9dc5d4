"""A live thread: answers stream into the thread as their agent writes them (start, appends,
stop with the step's metadata), a workspace without streaming gets whole answers (and is
remembered), and a stream a stopped process left open is finished, never doubled."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from flotilla.agents.core.errors import TransientError
from flotilla.agents.core.retry_policy import JOB
from flotilla.agents.planning.plan import Plan
from flotilla.agents.reconciling.final_texts import FinishedAnswer
from flotilla.agents.reconciling.ports import StepTag
from flotilla.bot.channel_pacing import ChannelBucket
from flotilla.local_slack import Message
from flotilla.storage.records import ConversationRecord, MessageRecord
from flotilla.storage.slack_fallbacks import fallbacks_of
from tests.e2e.slice.conftest import Run
from tests.e2e.slice.faults import FaultyPort

RESULT = "flotilla_result"
# past the job retry policy's wait (a job handed over after Slack 5xx is taken again)
RETRY_AFTER_JOB = JOB.cap.total_seconds() + 1


def calls(run: Run) -> Counter[str]:
    return Counter(name for name, outcome in run.stack.workspace.api_log if outcome == "ok")


def answers(run: Run, root: Message) -> list[Message]:
    return [m for m in run.messages(root) if (m.metadata or {}).get("event_type") == RESULT]


async def test_an_agents_answer_streams_then_stops_with_the_steps_metadata(
    start: Callable[..., Any],
) -> None:
    async with start(stream_append_seconds=0.0) as run:
        root = run.ask("research our launch numbers and write a note")
        await run.says(root, "[offline model] writer")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        made = calls(run)
        streamed = answers(run, root)
        agent_steps = [s for s in plan.steps if s.assignee not in ("user",)]
        # every step's answer was streamed: one start and one stop each, appends between
        assert made["chat.startStream"] == made["chat.stopStream"] == len(streamed) >= 2
        assert made["chat.appendStream"] >= len(streamed)
        for message in streamed:
            assert not message.streaming and message.text.startswith("[offline model]")
            payload = message.metadata["event_payload"]  # type: ignore[index]
            step = plan.step(payload["step"])
            assert step is not None and step.status == "done"
            assert payload["key"] == f"plan:{plan.id}:step:{step.index}:attempt:1:result"
            assert "streaming" not in payload
            # later steps get the structured summary, never the streamed text
            assert step.output_summary and step.output_summary != message.text
            own_app = run.stack.agent_apps.get(step.assignee)
            if own_app is not None:  # streamed by the agent's own app
                assert message.app_id == own_app.app_id and message.username is None
            elif step.assignee != "commander":  # as the agent's persona
                assert message.username and message.app_id == run.stack.commander.app_id
        assert len(streamed) == len(agent_steps)
        # asked once per token: the service's start and Bolt's authorization share the answer
        assert made["auth.test"] == 1


@pytest.mark.parametrize("error", ["messages_tab_disabled", "feature_disabled"])
async def test_without_streaming_answers_are_posted_whole_and_it_is_remembered(
    start: Callable[..., Any], error: str
) -> None:
    async with start(stream_append_seconds=0.0) as run:
        run.stack.workspace.refuse("chat.startStream", error)
        root = run.ask("research our launch numbers and write a note")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        posted = answers(run, root)
        assert len(posted) == len(plan.steps) and all(not m.streaming for m in posted)
        tried = [o for name, o in run.stack.workspace.api_log if name == "chat.startStream"]
        assert tried == [error]  # asked once, then remembered
        async with run.service.db.read() as conn:
            assert await fallbacks_of(conn, run.service.team_id) == {"streaming"}

        second = run.ask("research the churn numbers and write a note")
        await run.quiesce()
        assert (await run.plan(second)).status == "completed"
        assert [o for name, o in run.stack.workspace.api_log if name == "chat.startStream"] == [
            error
        ]


class StopsMidStream(FaultyPort):
    """The first streamed answer's stop never happens: the process "stops" after its
    appends (the job is handed over, as after a crash), leaving the message streaming."""

    def __init__(self, port: Any) -> None:
        super().__init__(port)
        self.left: asyncio.Event = asyncio.Event()

    async def open_answer(
        self,
        conversation: ConversationRecord,
        *,
        agent: str | None,
        result_of: StepTag | None,
        key: str,
        plan_id: int,
        thread: list[MessageRecord] | None = None,
        plan: Plan | None = None,
    ) -> Any:
        stream = await super().open_answer(
            conversation,
            agent=agent,
            result_of=result_of,
            key=key,
            plan_id=plan_id,
            thread=thread,
            plan=plan,
        )
        if not self.left.is_set() and stream.ts is None:
            original = stream.finish

            async def finish(text: str) -> FinishedAnswer:
                if stream.ts is None or self.left.is_set():
                    return await original(text)
                self.left.set()
                raise TransientError("the process stopped")

            stream.finish = finish  # type: ignore[method-assign]
        return stream


async def test_a_stream_left_open_is_finished_once_not_answered_twice(
    start: Callable[..., Any],
) -> None:
    async with start(stream_append_seconds=0.0) as run:
        port = StopsMidStream(run.service.port)
        port.install(run)
        root = run.ask("research our launch numbers and write a note")
        await asyncio.wait_for(port.left.wait(), 20)
        await run.quiesce()
        left = [m for m in run.messages(root) if m.streaming]
        assert len(left) == 1  # the first answer is still streaming in the thread
        run.clock.advance(RETRY_AFTER_JOB)  # the job is handed over: the step runs again
        run.service.wake()
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        finished = answers(run, root)
        assert len(finished) == len(plan.steps), run.transcript(root)
        assert not any(m.streaming for m in run.messages(root))
        again = next(m for m in finished if m.ts == left[0].ts)  # the same message, finished
        assert again.text.startswith("[offline model]") and again.edited


async def test_a_burst_of_plans_in_one_channel_is_paced_without_slowing_another(
    start: Callable[..., Any],
) -> None:
    # 3 plans post about 18 times in 3 s when nothing waits: 2 at once and 2 a second more
    # let at most 2 + 2·t through in t seconds, so unless the 18 posts spread over 8 s some
    # are queued however fast or slow the machine is (at 10 a second they were only while
    # the posts came faster than that)
    rate, burst = 2.0, 2
    async with start(channel_posts_per_second=rate, channel_post_burst=burst) as run:
        ws = run.stack.workspace
        people = list(run.stack.people.values())
        apps = [run.stack.commander, *run.stack.agent_apps.values()]
        other = ws.create_channel("other", [*people, *apps])
        roots = [run.ask(f"research launch number {n} and write a note") for n in range(3)]
        quiet = run.driver.mention(
            "maya", "other", run.stack.commander, "research the churn numbers and write a note"
        )
        await run.quiesce()
        for root in roots:
            assert (await run.plan(root)).status == "completed", run.transcript(root)
        pacer = run.service.poster.pacer
        made = calls(run)
        assert [e for e in ws.api_log if e[1] != "ok"] == []
        assert len(pacer.granted) == made["chat.postMessage"] + made["chat.startStream"]
        launch = [g for g in pacer.granted if g[0] == run.stack.channel.id]
        assert sum(wait > 0 for _, _, wait in launch) > 0  # the burst was queued
        for channel in (run.stack.channel.id, other.id):
            sends = [(at - wait, at) for c, at, wait in pacer.granted if c == channel]
            times = [at for _, at in sends]
            for begin in times:  # no second holds more than the burst and the rate allow
                assert sum(begin <= t < begin + 1.0 for t in times) <= burst + rate
            # each send waited only for its own channel's earlier sends, never another's
            alone = ChannelBucket(rate, burst)
            assert [alone.reserve(arrived) for arrived, _ in sends] == times
        assert (await run.plan(quiet)).status == "completed"
