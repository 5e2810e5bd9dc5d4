"""A crash costs at most one lease (issue 10, defect 6), on SQLite and PostgreSQL.

Two Flotilla processes share one database, one local Slack workspace and one fake clock.
Process A starts the writer's step and dies without releasing anything
(`Executor.abandon()`: its tasks are dropped as by kill -9). Process B must not take the
step while A's lease holds, and must take it – the outbox row *and* the run lease, in the
same pass – at the instant the lease ends, then finish it once.

Why this fails on the old code (commit 2b266dd, `bot/service.py` run_lease +
`agents/reconciling/outbox.py`): the outbox claimed the row (due again at T0 + lease) in one
transaction and the job claimed the run lease (until T1 + lease, T1 > T0: the dispatch was
posted in between) in another, and the heartbeat renewed them one after the other, while
`claim_run` took over a lease only once `lease_until < now`. B's loop wakes exactly when
the row comes due, so it claimed the row while the run lease still held, was refused
("runs in another process"), and left the row held for a whole second lease: two leases
per crash (230–246 s against a 120 s lease). Each of those re-claims also raised the
row's `attempts`, and past 8 of them the next failed delivery gave the row up at once
(now only `failures` counts). Here the lease and the row are taken,
renewed and released in one transaction and end at the same instant (the test asserts
it), and B resumes at that instant – with the clock ticking between A's claim of the row
and of the lease, as real posting takes time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from pydantic import ValidationError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import select

from flotilla.agents.core.errors import TransientError
from flotilla.agents.planning.effects import PostDispatch, step_key
from flotilla.agents.reconciling.ports import SlackPort
from flotilla.agents.running import offline
from flotilla.agents.running.offline import first_prompt
from flotilla.bot.local import LocalStack, start_local_stack
from flotilla.bot.metrics import Metrics
from flotilla.bot.serve import options_from
from flotilla.bot.service import MetricsObserver, Options, SlackService
from flotilla.bot.settings import Settings
from flotilla.local_slack import Driver, Message
from flotilla.storage.db import Database
from flotilla.storage.outbox import outbox_t
from flotilla.storage.records import ConversationRecord, MessageRecord
from flotilla.storage.run_request_leases import holders
from flotilla.storage.run_requests import get_request, requests_t
from flotilla.storage.runs import leases_t
from tests.e2e.slice.scripts import tools_of
from tests.fakes.clock import FakeClock

LEASE = timedelta(seconds=30)
REQUEST = "research the history of our launch emails and write a short report"
WRITER_ANSWER = "[offline model] writer:"


class HangsInTheWriter:
    """The offline model, except that the writer's step never ends (the process dies)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if "create_plan" not in tools_of(info) and first_prompt(messages).startswith(
            "Write up the findings"
        ):
            self.started.set()
            await asyncio.Event().wait()
        return offline.respond(messages, info)

    def model(self) -> Model:
        return FunctionModel(self, model_name="hangs")


class Counting(MetricsObserver):
    """The service's telemetry, and which agents' runs finished in this process."""

    def __init__(self, metrics: Metrics) -> None:
        super().__init__(metrics)
        self.ran_agents: list[str] = []

    def ran(self, agent: str, seconds: float) -> None:
        self.ran_agents.append(agent)
        super().ran(agent, seconds)


def ran(service: SlackService) -> list[str]:
    """The agents whose runs finished (and reported an outcome) in `service`'s process."""
    observer = service.context.observer
    assert isinstance(observer, Counting)
    return observer.ran_agents


@dataclass
class Held:
    """The writer's outbox row and run lease as stored."""

    row_due: datetime
    row_state: str
    attempts: int
    failures: int
    lease_owner: str | None
    lease_until: datetime | None


@dataclass
class Processes:
    stack: LocalStack
    driver: Driver
    clock: FakeClock  # the processes' shared clock, moved by the test
    root: Message | None = None

    @property
    def service(self) -> SlackService:
        return self.stack.service

    async def writer_started(self, model: HangsInTheWriter) -> str:
        """Ask for the plan; once the writer's run hangs, the writer's step key."""
        self.clock.tick = timedelta(milliseconds=50)
        self.root = self.driver.mention("maya", "launch", self.stack.commander, REQUEST)
        await asyncio.wait_for(model.started.wait(), 20)
        self.clock.tick = timedelta(0)
        plan = await self.plan()
        assert [s.status for s in plan.steps] == ["done", "in_progress", "pending"]
        return step_key(plan.id, 2, 1)

    async def crash_and_replace(self, model: Model) -> SlackService:
        """A dies as by kill -9 (nothing released); B starts on the same database."""
        old = self.service
        await old.executor.abandon()
        return await self.replace(old, model)

    async def replace(self, old: SlackService, model: Model) -> SlackService:
        if self.stack.runner is not None:
            await self.stack.runner.cleanup()
        new = SlackService(
            old.db,
            old.client,
            api_url=self.stack.workspace.api_url,
            cipher=old.cipher,
            options=old.options,
            clock=old.clock,
            model=model,
        )
        new.context.observer = Counting(new.metrics)
        self.stack.service = new
        await new.start()
        await self.stack._serve()  # the workspace's events go to B now
        return new

    async def held(self, key: str) -> Held:
        async with self.service.db.read() as conn:
            row = (
                (await conn.execute(select(outbox_t).where(outbox_t.c.idempotency_key == key)))
                .mappings()
                .one()
            )
            lease = (
                (await conn.execute(select(leases_t).where(leases_t.c.run_key == key)))
                .mappings()
                .first()
            )
            granted = (await holders(conn)).get(key)  # a step run's lease is its grant
        owner, until = granted or (
            (lease["owner"], lease["lease_until"]) if lease else (None, None)
        )
        return Held(
            row_due=row["available_at"],
            row_state=row["state"],
            attempts=row["attempts"],
            failures=row["failures"],
            lease_owner=owner,
            lease_until=until,
        )

    async def plan(self) -> Any:
        assert self.root is not None
        conversation = await self.service.find_conversation(self.root.channel, self.root.ts)
        assert conversation is not None
        plan = await self.service.reconciler.plan(conversation.id)
        assert plan is not None
        return plan

    def texts(self) -> list[str]:
        assert self.root is not None
        return [m.text for m in self.driver.thread("launch", self.root.ts)]

    def dispatches(self) -> list[tuple[int, int]]:
        assert self.root is not None
        found = []
        for message in self.driver.thread("launch", self.root.ts):
            meta = message.metadata or {}
            if meta.get("event_type") == "flotilla_dispatch":
                found.append((meta["event_payload"]["step"], meta["event_payload"]["attempt"]))
        return found

    async def completed_once(self) -> None:
        """The plan completed with every step run once and the writer's answer once."""
        await self.service.settle()
        plan = await self.plan()
        assert plan.status == "completed", "\n".join(self.texts())
        assert [s.attempts for s in plan.steps] == [1, 1, 1]  # nothing re-dispatched
        assert self.dispatches() == [(1, 1), (2, 1)]  # the redelivery posted nothing twice
        assert sum(t.startswith(WRITER_ANSWER) for t in self.texts()) == 1


@pytest.fixture
async def processes(db: Database) -> AsyncIterator[Any]:
    """`async with processes(model) as p:` – process A (scripted by `model`) on `db`."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def starter(model: Model, heartbeat: float = 5.0) -> AsyncIterator[Processes]:
        clock = FakeClock(datetime.now(UTC))
        stack = await start_local_stack(
            db,
            options=Options(lease_seconds=LEASE.total_seconds(), heartbeat_seconds=heartbeat),
            ack_timeout=2.0,
            retry_delays=(0.0, 0.05, 0.05),
            clock=clock,
            model=model,
        )
        stack.service.context.observer = Counting(stack.service.metrics)
        try:
            yield Processes(stack, Driver(stack.workspace, default_timeout=20.0), clock)
        finally:
            await stack.stop()

    yield starter


@pytest.mark.parametrize(
    "heartbeat",
    [5.0, 0.05],  # real seconds; the clock ticks 50 ms a read while the plan starts
    ids=["claimed-as-delivered", "claimed-a-heartbeat-after-delivery"],
)
async def test_after_a_crash_the_step_resumes_when_its_one_lease_ends(
    processes: Any, heartbeat: float
) -> None:
    """Claimed within a heartbeat of its row's delivery claim, a run's lease ends with that
    claim (the row is not written again); claimed later, the row is held to the lease's
    end. Either way both come free at one instant."""
    hang = HangsInTheWriter()
    async with processes(hang.model(), heartbeat=heartbeat) as p:
        key = await p.writer_started(hang)
        a = p.service
        b = await p.crash_and_replace(offline.offline_model())
        # read once A is gone: a heartbeat of A's just before the crash may have moved them
        crashed_at = p.clock.now
        before = await p.held(key)
        assert before.lease_owner == a.owner
        assert before.lease_until is not None
        # the row and the run lease end at the same instant, at most one lease from now
        assert before.row_due == before.lease_until <= crashed_at + LEASE
        assert (before.attempts, before.failures) == (1, 0)

        await b.settle()
        p.clock.now = before.lease_until - timedelta(seconds=1)  # A's lease still holds
        await b.settle()
        waiting = await p.held(key)
        assert waiting.lease_owner == a.owner  # B did not take the run...
        assert waiting.attempts == 1  # ...nor claim its row
        assert not any(t.startswith(WRITER_ANSWER) for t in p.texts())
        assert [s.status for s in (await p.plan()).steps] == ["done", "in_progress", "pending"]

        p.clock.now = before.lease_until  # the instant B's loop wakes: the row came due
        await b.drain()  # one pass: B claims the row and, with it, the run lease
        await asyncio.gather(*(j.task for j in list(b.executor.jobs.values()) if j.task))
        assert sum(t.startswith(WRITER_ANSWER) for t in p.texts()) == 1
        assert [s.status for s in (await p.plan()).steps] == ["done", "done", "in_progress"]
        await b.settle()
        after = await p.held(key)
        assert after.row_state == "sent"
        assert (after.attempts, after.failures) == (2, 0)  # a re-claim is not a failure
        assert after.lease_owner is None  # released when the step was done
        await p.completed_once()
        assert ran(a) == ["researcher"]
        assert ran(b) == ["writer", "commander"]  # the writer's outcome: reported once, by B


async def test_crashes_in_a_row_never_give_the_step_up(processes: Any) -> None:
    hang = HangsInTheWriter()
    async with processes(hang.model()) as p:
        key = await p.writer_started(hang)
        crashes = p.service.executor.outbox.retry.maximum_attempts + 1
        for crash in range(1, crashes + 1):
            again = HangsInTheWriter()
            replica = await p.crash_and_replace(again.model())
            held = await p.held(key)
            assert held.lease_until is not None
            p.clock.now = held.lease_until
            await replica.drain()
            await asyncio.wait_for(again.started.wait(), 20)  # it runs the step again
            held = await p.held(key)
            assert held.lease_owner == replica.owner
            assert (held.row_state, held.attempts, held.failures) == ("pending", crash + 1, 0)

        last = await p.crash_and_replace(offline.offline_model())
        last.context.port = cast(SlackPort, LookFailsOnce(last.context.port))
        held = await p.held(key)
        assert held.lease_until is not None
        p.clock.now = held.lease_until
        await last.drain()
        failed = await p.held(key)
        # one failed delivery after all those re-claims: retried, not given up
        assert (failed.row_state, failed.attempts, failed.failures) == ("pending", crashes + 2, 1)
        p.clock.now = failed.row_due  # its backoff
        await last.settle()
        assert (await p.held(key)).failures == 1
        await p.completed_once()


class LookFailsOnce:
    """Flotilla's Slack port, except that its first look into a thread fails as a Slack
    503 would (a failed delivery of the redelivered dispatch)."""

    def __init__(self, port: SlackPort) -> None:
        self.port = port
        self.failed = False

    async def dispatch_posted(
        self, conversation: ConversationRecord, effect: PostDispatch
    ) -> MessageRecord | None:
        if not self.failed:
            self.failed = True
            raise TransientError("Slack answered 503")
        return await self.port.dispatch_posted(conversation, effect)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.port, name)


async def test_a_graceful_stop_hands_the_step_over_at_once(processes: Any) -> None:
    hang = HangsInTheWriter()
    async with processes(hang.model()) as p:
        key = await p.writer_started(hang)
        a = p.service
        assert await a.stop(grace=0) == [key]
        handed = await p.held(key)
        assert handed.lease_owner is None  # the run lease is released...
        assert handed.row_due <= p.clock.now  # ...and the row is due now
        assert (handed.attempts, handed.failures) == (1, 0)

        b = await p.replace(a, offline.offline_model())
        await b.settle()  # no clock advance: b takes it over at once – through the outbox
        # (a second delivery) or through the scheduler's grant of the request a handed over
        # (the grant holds the row), whichever of b's loops comes first
        held = await p.held(key)
        assert held.row_state == "sent" and held.lease_owner is None
        await p.completed_once()
        assert ran(b) == ["writer", "commander"]


async def test_a_job_that_lost_its_lease_stops_and_leaves_the_row_to_the_new_holder(
    processes: Any,
) -> None:
    hang = HangsInTheWriter()
    async with processes(hang.model(), heartbeat=0.05) as p:  # real seconds between beats
        key = await p.writer_started(hang)
        job = p.service.executor.jobs[key]
        assert job.task is not None
        async with p.service.db.write() as conn:  # another process took the run over
            await conn.execute(
                requests_t.update().where(requests_t.c.run_key == key).values(holder="elsewhere")
            )
        await asyncio.wait_for(asyncio.gather(job.task, return_exceptions=True), 20)
        assert job.lease_lost and not job.cancelled
        held = await p.held(key)
        # the row is the new holder's to settle: marking it sent here would leave the
        # step in progress for ever if that process died too
        assert held.row_state == "pending"
        assert held.lease_owner == "elsewhere"
        assert [s.status for s in (await p.plan()).steps] == ["done", "in_progress", "pending"]
        assert not any(t.startswith(WRITER_ANSWER) for t in p.texts())


class SlowDispatch:
    """Flotilla's Slack port, except that posting a dispatch waits until the test lets it
    go: a slow Slack call in the middle of the batch the outbox claimed."""

    def __init__(self, port: SlackPort) -> None:
        self.port = port
        self.reached = asyncio.Event()
        self.go = asyncio.Event()

    async def post_dispatch(
        self, conversation: ConversationRecord, effect: PostDispatch
    ) -> MessageRecord | None:
        self.reached.set()
        await self.go.wait()
        return await self.port.post_dispatch(conversation, effect)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.port, name)


async def test_a_stop_during_a_delivery_hands_its_row_over_at_once(processes: Any) -> None:
    async with processes(offline.offline_model()) as p:
        a = p.service
        slow = SlowDispatch(a.context.port)
        a.context.port = cast(SlackPort, slow)
        p.root = p.driver.mention("maya", "launch", p.stack.commander, REQUEST)
        await asyncio.wait_for(slow.reached.wait(), 20)  # the researcher's dispatch is posting
        stopping = asyncio.create_task(a.stop(grace=0))
        await asyncio.sleep(0)  # the stop begins while the post is under way...
        slow.go.set()  # ...then Slack answers
        key = step_key((await p.plan()).id, 1, 1)
        # the row was delivered: its run asked the scheduler for a slot, and a stopping
        # process grants nothing more, so no job of A's holds it
        assert await stopping == []
        handed = await p.held(key)
        assert handed.lease_owner is None
        async with a.db.read() as conn:
            request = await get_request(conn, key)
        assert request is not None
        assert (request.state, request.holder) == ("waiting", None)  # any process grants it

        b = await p.replace(a, offline.offline_model())
        await b.settle()  # no clock advance
        await p.completed_once()
        assert ran(b) == ["researcher", "writer", "commander"]


def test_lease_and_heartbeat_are_settings_passed_to_the_service() -> None:
    settings = Settings(FLOTILLA_RUN_LEASE_SECONDS=5, FLOTILLA_HEARTBEAT_SECONDS=1)
    options = options_from(settings)
    assert (options.lease_seconds, options.heartbeat_seconds) == (5.0, 1.0)
    assert (Settings().run_lease_seconds, Settings().heartbeat_seconds) == (30.0, 5.0)
    with pytest.raises(ValidationError, match="less than half of FLOTILLA_RUN_LEASE_SECONDS"):
        Settings(FLOTILLA_RUN_LEASE_SECONDS=10, FLOTILLA_HEARTBEAT_SECONDS=5)
