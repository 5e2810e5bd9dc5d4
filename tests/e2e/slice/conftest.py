"""The whole product end to end: the real Bolt app over HTTP against the local workspace,
real storage, and the offline (or a scripted) model through pydantic-ai."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.planning.plan import Plan
from flotilla.agents.running import offline
from flotilla.agents.running.streamed_function import streamed
from flotilla.bot.local import LocalStack, start_local_stack
from flotilla.bot.service import Options, SlackService
from flotilla.local_slack import Driver, Message
from flotilla.local_slack.api import METHODS, Call
from tests.e2e.slice.scripts import Script
from tests.fakes.clock import FakeClock

FAST_RETRIES = (0.0, 0.05, 0.05)
REQUEST = "compare our pricing with the top three competitors and draft a note for the sales team"


def scripted(script: Script) -> FunctionModel:
    """The offline model, except where `script` answers (returns a response)."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return script(messages, info) or offline.respond(messages, info)

    return FunctionModel(respond, stream_function=streamed(respond), model_name="scripted")


@dataclass
class Run:
    stack: LocalStack
    driver: Driver
    clock: FakeClock  # the service's clock, moved by the test (backoffs without waiting)

    @property
    def service(self) -> SlackService:
        return self.stack.service

    def ask(self, text: str, who: str = "maya") -> Message:
        return self.driver.mention(who, "launch", self.stack.commander, text)

    async def quiesce(self) -> None:
        """Until no event is in flight, no job runs and nothing due is in the outbox."""
        for _ in range(100):
            await self.driver.deliveries_settled()
            seen = len(self.stack.workspace.events.deliveries)
            await self.service.settle()
            await self.driver.deliveries_settled()
            if (
                len(self.stack.workspace.events.deliveries) == seen
                and not self.service.executor.jobs
            ):
                return
        raise AssertionError("the stack did not come to rest")

    async def plan(self, root: Message) -> Plan:
        conversation = await self.service.find_conversation(root.channel, root.ts)
        assert conversation is not None, "no conversation for this thread"
        plan = await self.service.reconciler.plan(conversation.id)
        assert plan is not None, "no plan in this thread"
        return plan

    def transcript(self, root: Message) -> str:
        return self.driver.transcript("launch", root.ts)

    async def says(self, root: Message, text: str, *, from_: str | None = None) -> Message:
        return await self.driver.thread_has_message("launch", root.ts, containing=text, from_=from_)

    async def modal(self, who: str) -> None:
        """Await the modal a click opened (views.open comes after the click's ack)."""
        person = self.driver.person(who)
        await self.driver.wait_for(
            lambda: self.stack.workspace.state.top_modal(person.id), what=f"a modal for {who}"
        )

    def dispatches(self, root: Message) -> list[tuple[int, int]]:
        """(step, attempt) of every dispatch message in the thread, in thread order."""
        found = []
        for message in self.messages(root):
            meta = message.metadata or {}
            if meta.get("event_type") in ("flotilla_dispatch", "flotilla_form"):
                payload = meta["event_payload"]
                found.append((payload["step"], payload["attempt"]))
        return found

    def messages(self, root: Message) -> list[Message]:
        return self.driver.thread("launch", root.ts)


@pytest.fixture
def start(tmp_path: Path) -> Callable[..., Any]:
    """`async with start(...) as run:` – a local stack on a fresh SQLite file."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def starter(
        *,
        db: Any = None,
        model: FunctionModel | None = None,
        rate_limits: bool = False,
        retry_delays: tuple[float, ...] = FAST_RETRIES,
        **options: Any,
    ) -> AsyncIterator[Run]:
        clock = FakeClock(datetime.now(UTC))
        stack = await start_local_stack(
            db or f"sqlite+aiosqlite:///{tmp_path / 'e2e.db'}",
            options=Options(**options),
            ack_timeout=2.0,
            retry_delays=retry_delays,
            clock=clock,
            model=model,
            rate_limits=rate_limits,
        )
        try:
            yield Run(stack, Driver(stack.workspace, default_timeout=20.0), clock)
        finally:
            await stack.stop()

    return starter


@pytest.fixture
def updated(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ts of every message chat.update was called on (the workspace's method, spied)."""
    seen: list[str] = []
    original = METHODS["chat.update"]

    async def spy(call: Call) -> Any:
        seen.append(str(call.args.get("ts")))
        return await original(call)

    monkeypatch.setitem(METHODS, "chat.update", spy)
    return seen
