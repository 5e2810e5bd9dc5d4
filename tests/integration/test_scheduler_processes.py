"""Three executors (three services, as three replicas would be) on one database, each with
its own admission loop: the deployment's cap and each process's cap hold across them, a
budget holds for all of them, no step runs twice, and a killed process's granted run is
taken over once its lease ended – on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.planning.plan import Plan
from flotilla.agents.running import offline
from flotilla.agents.running.offline import first_prompt
from flotilla.agents.scheduling.admission_policy import SchedulerOptions
from flotilla.bot.local import LocalStack, start_local_stack
from flotilla.bot.service import Options, SlackService
from flotilla.local_slack import Driver, Message
from flotilla.storage.db import Database
from flotilla.storage.records import RunRequestRecord
from flotilla.storage.run_requests import queued_requests
from flotilla.storage.usage import record_usage
from tests.e2e.slice.scripts import tools_of
from tests.eventually import eventually
from tests.fakes.clock import FakeClock

WAIT = 60.0  # seconds: a bound on a hung run, never a sleep
REQUEST = "research the history of our launch emails and write a short report"
RESEARCH = "Research this"  # the researcher step's prompt begins so (offline plans)
RESEARCHER_ANSWER = "[offline model] researcher:"


class HeldResearch:
    """The offline model, except that researcher runs wait until released; counts them."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.calls = 0
        self.running = 0
        self.most_at_once = 0

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        commander = bool({"create_plan", "retry_step"} & tools_of(info))
        if not commander and first_prompt(messages).startswith(RESEARCH):
            self.calls += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            try:
                await self.release.wait()
            finally:
                self.running -= 1
        return offline.respond(messages, info)

    def model(self) -> Model:
        return FunctionModel(self, model_name="held")


@dataclass
class Three:
    stack: LocalStack
    services: list[SlackService]
    driver: Driver
    clock: FakeClock  # the processes' shared clock, moved by the test

    def ask(self) -> Message:
        return self.driver.mention("maya", "launch", self.stack.commander, REQUEST)

    async def queue(self) -> list[RunRequestRecord]:
        async with self.stack.service.db.read() as conn:
            return await queued_requests(conn)

    async def settle(self) -> None:
        for _ in range(20):
            for service in self.services:
                await service.settle()
            if not any(s.executor.jobs for s in self.services) and not [
                r for r in await self.queue() if r.state != "waiting" or r.wait_kind is None
            ]:
                return

    async def plans(self, roots: list[Message]) -> list[Plan | None]:
        service = self.stack.service
        out: list[Plan | None] = []
        for root in roots:
            conversation = await service.find_conversation(root.channel, root.ts)
            assert conversation is not None
            out.append(await service.reconciler.plan(conversation.id))
        return out


@asynccontextmanager
async def three(db: Database, model: Model, scheduler: SchedulerOptions) -> AsyncIterator[Three]:
    clock = FakeClock(datetime.now(UTC).replace(hour=12))
    options = Options(lease_seconds=30.0, heartbeat_seconds=5.0, scheduler=scheduler)
    stack = await start_local_stack(
        db, options=options, ack_timeout=2.0, retry_delays=(0.0, 0.05), clock=clock, model=model
    )
    first = stack.service
    services = [first]
    try:
        for _ in range(2):  # two more replicas on the same database, delivering and granting
            other = SlackService(
                first.db,
                first.client,
                api_url=stack.workspace.api_url,
                cipher=first.cipher,
                options=options,
                clock=clock,
                model=model,
            )
            await other.start()
            services.append(other)
        yield Three(stack, services, Driver(stack.workspace, default_timeout=WAIT), clock)
    finally:
        for service in services[1:]:
            await service.stop()
        await stack.stop()


def granted(queue: list[RunRequestRecord]) -> list[RunRequestRecord]:
    return [r for r in queue if r.state == "granted"]


async def test_caps_hold_across_three_processes_and_no_step_runs_twice(db: Database) -> None:
    held = HeldResearch()
    scheduler = SchedulerOptions(capacity=2, process_capacity=1, poll_seconds=0.1)
    async with three(db, held.model(), scheduler) as p:
        roots = [p.ask() for _ in range(3)]

        async def two_held_and_one_in_line() -> bool:
            queue = await p.queue()
            next_up = any(r.wait_reason == "waiting: next in line" for r in queue)
            return held.running == 2 and next_up

        await eventually(
            two_held_and_one_in_line, WAIT, what="two researcher runs held, a third in line"
        )
        queue = await p.queue()
        holders = [r.holder for r in granted(queue)]
        assert len(holders) == 2  # the deployment's cap
        assert len(set(holders)) == 2  # each process's cap: one run each
        assert {s.owner for s in p.services} >= set(holders)

        held.release.set()
        await eventually(
            lambda: _all_completed(p, roots),
            WAIT,
            what="every plan completed in one of the processes",
        )
        await p.settle()
        assert held.most_at_once <= 2
        assert held.calls == 3  # one researcher run per plan: none ran twice
        for plan in await p.plans(roots):
            assert plan is not None and [s.attempts for s in plan.steps] == [1, 1, 1]
        for root in roots:
            texts = [m.text for m in p.driver.thread("launch", root.ts)]
            assert sum(t.startswith(RESEARCHER_ANSWER) for t in texts) == 1


async def _all_completed(p: Three, roots: list[Message]) -> bool:
    plans = await p.plans(roots)
    return all(plan is not None and plan.status == "completed" for plan in plans)


async def test_a_killed_process_run_is_taken_over_after_its_lease(db: Database) -> None:
    held = HeldResearch()
    scheduler = SchedulerOptions(capacity=3, process_capacity=1, poll_seconds=0.1)
    async with three(db, held.model(), scheduler) as p:
        root = p.ask()
        await eventually(lambda: held.running == 1, WAIT, what="the researcher's run is held")
        (run,) = [r for r in granted(await p.queue()) if r.agent_name == "researcher"]
        dead = next(s for s in p.services if s.owner == run.holder)
        await dead.executor.abandon()  # kill -9: nothing released
        alive = [s for s in p.services if s is not dead]
        for service in alive:
            await service.settle()
        again = [r for r in await p.queue() if r.run_key == run.run_key]
        assert again[0].holder == dead.owner  # its lease holds: nobody takes it yet

        p.clock.advance(timedelta(seconds=31))  # the dead process's lease is over
        held.release.set()
        for service in alive:
            service.executor.admission.wake()
        await eventually(
            lambda: _all_completed(p, [root]), WAIT, what="the plan completed elsewhere"
        )
        p.services = alive
        await p.settle()
        texts = [m.text for m in p.driver.thread("launch", root.ts)]
        assert sum(t.startswith(RESEARCHER_ANSWER) for t in texts) == 1, "\n".join(texts)
        (plan,) = await p.plans([root])
        assert plan is not None and [s.attempts for s in plan.steps] == [1, 1, 1]


async def test_a_channel_budget_holds_for_every_process(db: Database) -> None:
    scheduler = SchedulerOptions(
        capacity=4, process_capacity=2, poll_seconds=0.1, budgets={"channel_day": 1_000}
    )
    async with three(db, offline.offline_model(), scheduler) as p:
        first = p.stack.service
        async with first.db.write() as conn:  # the channel spent its day's budget already
            await record_usage(
                conn,
                team_id=first.team_id,
                channel_id=p.stack.channel.id,
                agent_name="researcher",
                model="offline",
                input_tokens=900,
                output_tokens=100,
                now=p.clock(),
            )
        root = p.ask()

        async def told_why() -> bool:
            return any(r.wait_kind == "budget" for r in await p.queue())

        await eventually(told_why, WAIT, what="the commander's turn waits for the budget")
        for service in p.services:  # every process looks, none grants it
            await service.executor.admission.run_pass()
        (waiting,) = await p.queue()
        assert waiting.state == "waiting"
        assert waiting.wait_reason == "waiting: channel budget (resets 00:00 UTC)"
        assert [m.text for m in p.driver.thread("launch", root.ts)][1:] == []  # no answer

        p.clock.advance(timedelta(days=1))  # the budget resets: the commander plans
        for service in p.services:
            service.executor.admission.wake()

        async def planned() -> bool:
            conversation = await first.find_conversation(root.channel, root.ts)
            assert conversation is not None
            return await first.reconciler.plan(conversation.id) is not None

        await eventually(planned, WAIT, what="the commander's turn ran after the reset")
