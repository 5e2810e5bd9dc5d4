"""Urgent work takes the slot of the first batch run to reach a model-turn boundary: with
every slot held by batch runs and an urgent run waiting for one, exactly one batch run
pauses – the first to reach a boundary – and the urgent run starts in its slot; runs that
reach a boundary together hand over once, and a run never pauses unless a waiter received
its slot. Real jobs (`agents/running/jobs.py`) driving real sessions (`agents/running/session.py`)
on
SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.planning.effects import PostDispatch
from flotilla.agents.running.attempt import Attempt
from flotilla.agents.running.jobs import JobRunner
from flotilla.agents.running.run_context import Context, ExecutorOptions
from flotilla.agents.running.session import RunLimits, RunSession
from flotilla.agents.scheduling.wait_marks import WaitMarks
from flotilla.agents.tools.context import RunJob
from flotilla.storage.db import Database
from flotilla.storage.records import RunRequestRecord
from flotilla.storage.run_request_leases import give_way, urgent_waits
from flotilla.storage.run_requests import (
    enqueue_request,
    get_request,
    grant_request,
    set_wait_reasons,
)

WAIT = 30.0  # seconds: a bound on a hung run, never a sleep
OPTIONS = ExecutorOptions(heartbeat=timedelta(hours=1))  # no beat: the boundary decides
BATCH_RUNS = 3  # they hold every slot


def values(key: str, priority: int) -> dict[str, Any]:
    return dict(
        effect_key=f"dispatch:{key}",
        effect_kind="post_dispatch",
        effect={},
        conversation_id=None,
        team_id="T1",
        channel_id="C1",
        agent_name="researcher",
        plan_id=None,
        step_index=None,
        attempt=None,
        priority=priority,
        estimate_tokens=0,
        tools=[],
    )


class BatchRun:
    """A batch run's model: its first request waits for `release`, answers with a tool call
    (a model-turn boundary follows the tool's return), and the next one answers."""

    def __init__(self) -> None:
        self.called = asyncio.Event()  # its first model request was sent
        self.release = asyncio.Event()
        self.requests = 0

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests += 1
        if self.requests == 1:
            self.called.set()
            await self.release.wait()
            return ModelResponse(parts=[ToolCallPart("look", {}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])


class Deployment:
    """One process's job runner; every slot granted to batch runs; the urgent runs it
    starts in a paused run's slot, recorded."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.started: list[str] = []
        self.urgent_started = asyncio.Event()
        self.waits = WaitMarks()
        self.waits.replace((), since=0)  # as a pass that found nobody waiting leaves them
        ctx = SimpleNamespace(
            db=db,
            clock=lambda: datetime.now(UTC),
            options=OPTIONS,
            observer=SimpleNamespace(jobs_running=lambda n: None),
            waits=self.waits,
        )
        self.runner = JobRunner(cast(Context, ctx), owner="p1", start_passed=self._start)
        self.runs = {f"batch-{i}": BatchRun() for i in range(BATCH_RUNS)}
        self.tasks: dict[str, asyncio.Task[None]] = {}

    async def _start(self, record: RunRequestRecord) -> None:
        self.started.append(record.run_key)
        self.urgent_started.set()

    async def start_batch(self) -> None:
        now = datetime.now(UTC)
        async with self.db.write() as conn:
            for key in self.runs:
                await enqueue_request(conn, run_key=key, now=now, **values(key, 5))
                assert await grant_request(conn, key, "p1", now=now, until=now + OPTIONS.lease)
        for i, (key, model) in enumerate(self.runs.items()):
            effect = PostDispatch(
                key=f"dispatch:{key}",
                conversation_id=1,
                plan_id=1,
                step=i + 1,
                attempt=1,
                agent="researcher",
                title="s",
                text="go",
            )
            self.runner.hold(effect, key, self._work(key, model), granted=True)
            task = self.runner.jobs[effect.key].task
            assert task is not None
            self.tasks[key] = task
        # each has passed its first boundary (nobody urgent waited then) and runs its turn
        await asyncio.wait_for(asyncio.gather(*(m.called.wait() for m in self.runs.values())), WAIT)

    def _work(self, key: str, model: BatchRun) -> Any:
        agent: Agent[None, str] = Agent(FunctionModel(model))

        @agent.tool_plain
        def look() -> str:
            return "seen"

        async def work(attempt: Attempt) -> None:
            session = RunSession(
                self.db,
                RunJob(run_key=key, team_id="T1", input="go"),
                "researcher",
                "function",
                lambda: datetime.now(UTC),
                yields=attempt.yields,
            )
            await session.drive(
                agent,
                FunctionModel(model),
                None,
                RunLimits(),
                prompt="go",
                history=None,
                deferred=None,
            )

        return work

    async def urgent_waits_for_a_slot(self) -> None:
        async with self.db.write() as conn:
            await enqueue_request(
                conn, run_key="urgent", now=datetime.now(UTC), **values("urgent", 1)
            )
            await set_wait_reasons(conn, [("urgent", "capacity", "waiting: next in line")])

    async def states(self) -> dict[str, str]:
        async with self.db.read() as conn:
            records = [await get_request(conn, key) for key in [*self.runs, "urgent"]]
        return {r.run_key: r.state for r in records if r is not None}


async def test_the_first_batch_run_to_reach_a_boundary_gives_its_slot_to_urgent_work(
    db: Database,
) -> None:
    deployment = Deployment(db)
    await deployment.start_batch()
    await deployment.urgent_waits_for_a_slot()
    first = deployment.runs["batch-1"]
    first.release.set()  # batch-1 answers its turn and reaches a boundary before the others
    await asyncio.wait_for(deployment.urgent_started.wait(), WAIT)
    await asyncio.wait_for(deployment.tasks["batch-1"], WAIT)
    assert deployment.started == ["urgent"]
    assert first.requests == 1  # paused at that boundary: its next request was not sent
    states = await deployment.states()
    assert states == {
        "batch-0": "granted",
        "batch-1": "preempted",
        "batch-2": "granted",
        "urgent": "granted",
    }
    assert not deployment.tasks["batch-0"].done() and not deployment.tasks["batch-2"].done()
    assert deployment.waits.may_wait(1)  # its plan's card reads why it waits again
    for key in ("batch-0", "batch-2"):  # nobody urgent waits now: they reach theirs, go on
        deployment.runs[key].release.set()
    await asyncio.wait_for(
        asyncio.gather(deployment.tasks["batch-0"], deployment.tasks["batch-2"]), WAIT
    )
    assert (await deployment.states())["batch-0"] == "done"
    assert (await deployment.states())["batch-2"] == "done"
    assert [m.requests for m in deployment.runs.values()] == [2, 1, 2]
    assert deployment.started == ["urgent"]


async def test_batch_runs_reaching_boundaries_together_hand_over_once(db: Database) -> None:
    deployment = Deployment(db)
    await deployment.start_batch()
    await deployment.urgent_waits_for_a_slot()
    for model in deployment.runs.values():
        model.release.set()  # all three reach a boundary at about the same moment
    await asyncio.wait_for(asyncio.gather(*deployment.tasks.values()), WAIT)
    states = await deployment.states()
    paused = [key for key in deployment.runs if states[key] == "preempted"]
    assert len(paused) == 1, states
    assert sorted(states.values()) == ["done", "done", "granted", "preempted"]
    assert states["urgent"] == "granted" and deployment.started == ["urgent"]
    assert deployment.runs[paused[0]].requests == 1
    assert sorted(m.requests for m in deployment.runs.values()) == [1, 2, 2]


async def test_one_hand_over_for_one_waiter_across_connections(db: Database) -> None:
    """Several runs (each its own connection, as processes) give way at once for one urgent
    waiter: exactly one hands its slot over; the others keep theirs. On PostgreSQL one run's
    hand-over is held open while another tries: that one skips the locked waiter."""
    now = datetime.now(UTC)
    until = now + timedelta(seconds=30)
    batch = [f"b{i}" for i in range(4)]
    async with db.write() as conn:
        for key in batch:
            await enqueue_request(conn, run_key=key, now=now, **values(key, 5))
            assert await grant_request(conn, key, f"p-{key}", now=now, until=until)
        await enqueue_request(conn, run_key="urgent", now=now, **values("urgent", 1))
        # no pass has looked at it: a quota may hold it, so no run gives way to it yet
        assert not await urgent_waits(conn, "b0", priority_at_most=1, yields_from=4)
        await set_wait_reasons(conn, [("urgent", "capacity", "waiting: next in line")])
        assert await urgent_waits(conn, "b0", priority_at_most=1, yields_from=4)
        assert not await urgent_waits(conn, "b0", priority_at_most=1, yields_from=6)
        assert not await urgent_waits(conn, "urgent", priority_at_most=1, yields_from=1)

    async def yield_(key: str) -> str | None:
        async with db.write() as conn:
            return await give_way(conn, key, f"p-{key}", now=now, until=until, priority_at_most=1)

    if db.engine.dialect.name == "postgresql":
        async with db.write() as held:  # b0's hand-over, not committed yet
            assert await give_way(held, "b0", "p-b0", now=now, until=until, priority_at_most=1)
            assert await asyncio.wait_for(yield_("b1"), WAIT) is None  # skipped, not blocked
        handed = [await yield_(key) for key in batch[1:]]
        assert handed == [None, None, None]
        winners = ["b0"]
    else:
        handed = await asyncio.gather(*(yield_(key) for key in batch))
        assert handed.count("urgent") == 1 and handed.count(None) == 3
        winners = [key for key, to in zip(batch, handed, strict=True) if to == "urgent"]
    async with db.read() as conn:
        records = {key: await get_request(conn, key) for key in [*batch, "urgent"]}
    for key, record in records.items():
        assert record is not None
        if key == "urgent":
            assert (record.state, record.holder) == ("granted", f"p-{winners[0]}")
        elif key in winners:
            assert (record.state, record.holder) == ("preempted", None)
        else:
            assert (record.state, record.holder) == ("granted", f"p-{key}")
