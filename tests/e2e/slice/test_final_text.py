"""A streamed answer's final text is stored with its step's outcome: in the transaction of
the outcome's reconcile on SQLite (no write of its own; on PostgreSQL just before it), and
by the redelivered job when the process stopped after Slack finished the stream but before
the outcome was stored."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from flotilla.agents.core.retry_policy import JOB
from flotilla.local_slack import Message
from flotilla.local_slack.api import METHODS, ApiError, Call
from flotilla.storage.conversations import thread_messages
from flotilla.storage.records import MessageRecord
from tests.db_counts import counting
from tests.e2e.slice.conftest import Run
from tests.e2e.slice.test_form_answer_kept import on  # noqa: F401 (the fixture)

RESULT = "flotilla_result"
RETRY_AFTER_JOB = JOB.cap.total_seconds() + 1  # past the job retry policy's wait (Slack 5xx)
REQUEST = "research our launch numbers and write a note"


def answers(run: Run, root: Message) -> list[Message]:
    return [m for m in run.messages(root) if (m.metadata or {}).get("event_type") == RESULT]


async def stored(run: Run, root: Message) -> dict[str, MessageRecord]:
    """The thread's stored messages by ts."""
    conversation = await run.service.find_conversation(root.channel, root.ts)
    assert conversation is not None
    async with run.service.db.read() as conn:
        return {m.ts: m for m in await thread_messages(conn, conversation.id)}


def assert_kept_final(kept: dict[str, MessageRecord], shown: list[Message]) -> None:
    """Every answer Slack shows is stored with its final text and metadata."""
    for message in shown:
        record = kept[message.ts]
        assert record.text == message.text, (record.text, message.text)
        assert record.metadata == message.metadata  # the step's, no longer `streaming`


async def test_a_streamed_answers_final_text_is_stored_with_its_outcome(
    start: Callable[..., Any],
) -> None:
    with counting() as counts:
        async with start(stream_append_seconds=0.0) as run:
            root = run.ask(REQUEST)
            await run.quiesce()
            plan = await run.plan(root)
            assert plan.status == "completed", run.transcript(root)
            streamed = answers(run, root)
            made = Counter(name for name, outcome in run.stack.workspace.api_log if outcome == "ok")
            assert made["chat.stopStream"] == len(streamed) >= 2
            assert_kept_final(await stored(run, root), streamed)
    # each final text committed with its step's outcome (the step's row, the job's settle),
    # never in a transaction of its own (a stream's start kept as its own event had stored
    # it first is an insert then an update of the start text: not a final text)
    shapes = [
        s for s in counts.together("UPDATE thread_messages") if "INSERT thread_messages" not in s
    ]
    assert len(shapes) == len(streamed), shapes
    assert all({"UPDATE plan_steps", "UPDATE run_requests"} <= shape for shape in shapes), shapes


@pytest.fixture
def stop_then_lose(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """The first chat.stopStream that finishes an answer is made, but its answer is lost
    (Slack's `internal_error`: the job is handed over, as after a process stopped there)."""
    lost = asyncio.Event()
    original = METHODS["chat.stopStream"]

    async def stop(call: Call) -> Any:
        result = await original(call)
        if not lost.is_set() and "metadata" in call.args:
            lost.set()
            raise ApiError("internal_error")
        return result

    monkeypatch.setitem(METHODS, "chat.stopStream", stop)
    return lost


async def test_a_stream_stopped_before_its_outcome_is_stored_converges_on_redelivery(
    on: Callable[..., Any],  # noqa: F811 (SQLite, and PostgreSQL's own write of the text)
    stop_then_lose: asyncio.Event,
    updated: list[str],
) -> None:
    async with on(stream_append_seconds=0.0) as run:
        root = run.ask(REQUEST)
        await asyncio.wait_for(stop_then_lose.wait(), 20)
        await run.quiesce()
        finished = answers(run, root)
        assert len(finished) == 1 and not finished[0].streaming  # finished in Slack…
        left = (await stored(run, root))[finished[0].ts]
        assert left.metadata is not None and left.metadata["event_payload"]["streaming"]
        assert left.text != finished[0].text  # …its stored text is what it started with
        run.clock.advance(RETRY_AFTER_JOB)  # the job is handed over: the step runs again
        run.service.wake()
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        streamed = answers(run, root)
        assert len(streamed) == len([s for s in plan.steps if s.assignee != "user"])
        made = Counter(name for name, outcome in run.stack.workspace.api_log if outcome == "ok")
        assert made["chat.startStream"] == len(streamed)  # not streamed nor posted twice
        assert finished[0].ts not in updated  # finished once: not edited after
        assert_kept_final(await stored(run, root), streamed)
