"""Faults for the executor's end-to-end tests: model runs held at a gate, Slack ports with
a fault at their edge, another app posting Flotilla's keys, and thread look-ups."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import select

from flotilla.agents.core.errors import TransientError
from flotilla.agents.planning.effects import AskUser, PostDispatch, ShowForm
from flotilla.agents.planning.plan import Plan
from flotilla.agents.reconciling.final_texts import FinishedAnswer
from flotilla.agents.reconciling.ports import StepTag
from flotilla.agents.running import offline
from flotilla.agents.running.offline import first_prompt
from flotilla.bot.identities import make_client
from flotilla.bot.slack_port import SlackPort
from flotilla.local_slack import Message
from flotilla.storage.outbox import outbox_t
from flotilla.storage.records import ConversationRecord, MessageRecord
from tests.e2e.slice.conftest import Run
from tests.e2e.slice.scripts import Script, tools_of

WAIT = 20.0  # seconds: a gate that never opens fails the test instead of hanging it


class Gate:
    """Holds the first model request of runs whose prompt starts with `prefix` until
    released; records that it was reached, and whether the waiting run was cancelled."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.stopped = asyncio.Event()  # a waiting run was cancelled
        self.calls = 0

    @property
    def cancelled(self) -> bool:
        return self.stopped.is_set()

    def holds(self, messages: list[ModelMessage], info: AgentInfo) -> bool:
        commander_turn = bool({"create_plan", "retry_step"} & tools_of(info))
        return not commander_turn and first_prompt(messages).startswith(self.prefix)

    async def wait(self) -> None:
        self.calls += 1
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.stopped.set()
            raise

    async def reached(self) -> None:
        await asyncio.wait_for(self.started.wait(), WAIT)

    async def cut(self) -> None:
        await asyncio.wait_for(self.stopped.wait(), WAIT)


def gated(*gates: Gate, script: Script | None = None) -> FunctionModel:
    """The offline model (or `script` where it answers), held at the gates' first request."""

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:  # a run's first request (not a tool result coming back)
            for gate in gates:
                if gate.holds(messages, info):
                    await gate.wait()
        found = script(messages, info) if script is not None else None
        return found or offline.respond(messages, info)

    return FunctionModel(respond, model_name="scripted")


def card_of(run: Run, root: Message) -> Message:
    return next(m for m in run.messages(root) if "Plan (" in m.text)


def after(run: Run, root: Message, message: Message) -> list[str]:
    """Texts posted in the thread after `message` (edits of earlier messages are not new)."""
    return [m.text for m in run.messages(root) if float(m.ts) > float(message.ts)]


def said(run: Run, root: Message, prefix: str) -> int:
    return sum(m.text.startswith(prefix) for m in run.messages(root))


async def outbox_row(run: Run, key: str) -> tuple[str, int]:
    """(state, claims) of the outbox row with `key`."""
    async with run.service.db.read() as conn:
        row = (
            await conn.execute(
                select(outbox_t.c.state, outbox_t.c.attempts).where(
                    outbox_t.c.idempotency_key == key
                )
            )
        ).one()
    return str(row.state), int(row.attempts)


def posted(run: Run, root: Message, not_by: str, event_type: str, key: str) -> int:
    """How many messages of apps other than `not_by` carry `event_type` with `key`."""
    return sum(
        1
        for m in run.messages(root)
        if m.bot_id not in (None, not_by)
        and (m.metadata or {}).get("event_type") == event_type
        and (m.metadata or {}).get("event_payload", {}).get("key") == key
    )


class FaultyPort(SlackPort):
    """Flotilla's own Slack port with a fault at its edge (the subclasses say which), put in
    place of the running service's port with `install`."""

    def __init__(self, port: SlackPort) -> None:
        super().__init__(port.db, port.client, port.poster, port.cipher, port.clock)
        self.team_id, self.bot_user_id, self.bot_id = port.team_id, port.bot_user_id, port.bot_id
        self.stream_interval = port.stream_interval
        self.plan_display.enabled = port.plan_display.enabled

    def install(self, run: Run) -> None:
        run.service.port = run.service.context.port = self


class LostAnswer(FaultyPort):
    """The Slack port, but Slack's answer to the first post starting with `text` is lost
    (a timeout after Slack accepted it): the outbox delivers the effect again."""

    def __init__(self, port: SlackPort, text: str) -> None:
        super().__init__(port)
        self.text = text
        self.lost = asyncio.Event()

    async def post_unkept(
        self, conversation: ConversationRecord, text: str, **kwargs: Any
    ) -> MessageRecord:
        posted = await super().post_unkept(conversation, text, **kwargs)  # every post's way
        self._lose(text)
        return posted

    def _lose(self, text: str) -> None:
        if text.startswith(self.text) and not self.lost.is_set():
            self.lost.set()
            raise TransientError("Slack did not answer in time")

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
        finish = stream.finish

        async def finish_then_lose(text: str) -> FinishedAnswer:
            finished = await finish(text)
            self._lose(text)
            return finished

        stream.finish = finish_then_lose  # type: ignore[method-assign]
        return stream


class BrokenAnswers(FaultyPort):
    """The Slack port with a bug: posting `agent`'s answer raises a programming error."""

    def __init__(self, port: SlackPort, agent: str) -> None:
        super().__init__(port)
        self.broken = agent

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
        if agent == self.broken:

            async def finish(text: str) -> FinishedAnswer:
                raise RuntimeError("a bug in posting the answer")

            stream.finish = finish  # type: ignore[method-assign]
        return stream


class FirstPostsFail(FaultyPort):
    """The Slack port, but step 1's dispatch and form fail their first post as a Slack 5xx
    does (transient: the outbox delivers the effect again, checking the thread first). The
    failing post waits for `go`, so the test decides what is in the thread by then."""

    def __init__(self, port: SlackPort) -> None:
        super().__init__(port)
        self.seen: set[str] = set()
        self.failed: dict[str, asyncio.Event] = {}
        self.go, self.raised = asyncio.Event(), asyncio.Event()

    async def _fail_first(self, effect: PostDispatch | ShowForm | AskUser) -> None:
        if effect.step != 1 or effect.key in self.seen:
            return
        self.seen.add(effect.key)
        self.failed.setdefault(effect.key, asyncio.Event()).set()
        await self.go.wait()
        self.raised.set()
        raise TransientError("Slack answered 503")

    async def failure(self, key: str) -> None:
        await asyncio.wait_for(self.failed.setdefault(key, asyncio.Event()).wait(), WAIT)

    async def post_dispatch(
        self, conversation: ConversationRecord, effect: PostDispatch
    ) -> MessageRecord | None:
        await self._fail_first(effect)
        return await super().post_dispatch(conversation, effect)

    async def post_form(
        self, conversation: ConversationRecord, effect: ShowForm | AskUser, plan: Any
    ) -> None:
        await self._fail_first(effect)
        await super().post_form(conversation, effect, plan)


async def impersonate(run: Run, root: Message, token: str, keys: list[tuple[str, str]]) -> None:
    """Another app posts, in the thread, messages carrying Flotilla's event types and keys."""
    client = make_client(token, run.stack.workspace.api_url)
    for event_type, key in keys:
        step = int(key.split(":")[3]) if ":step:" in key else 0
        await client.chat_postMessage(
            channel=run.stack.channel.id,
            thread_ts=root.ts,
            text=f"not Flotilla: {key}",
            metadata={
                "event_type": event_type,
                "event_payload": {
                    "plan_id": int(key.split(":")[1]),
                    "step": step,
                    "attempt": 1,
                    "key": key,
                },
            },
        )
