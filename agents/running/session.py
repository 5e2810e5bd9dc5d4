"""Crash-safe agent sessions: a run's message history stored as it grows, and its usage.

`RunSession.drive` runs a pydantic-ai agent node by node and stores the history whenever it
grows, each time in one small write transaction: a model response before the first of its
tool calls runs, after every tool call that completes (see `agents/tools/journal.py`), and
with the request of tool returns before it is sent. A new run's first request (its prompt,
rebuilt from the step if the run starts again) is stored with the response to it: before
that nothing was paid for. The response that ends the run (its answer: words, or only the
output tool's call) reaches no tool: it is stored by `close` with the output tool's return
and the run's final status, one write – between the two there is no call of any kind, only
pydantic-ai checking the output. Once closed, a crash continues from the stored answer,
processing its output again without a model call. A run interrupted by a crash is continued
from what was stored: a finished tool call is never run again, and a stored request is sent
as it is. Each save also records the tokens spent since the previous one in the usage
ledger (workspace, channel, plan, step, agent, model), in the same transaction, so the
ledger and the stored history never disagree, even after a crash. Failures are stored as
`failed` and re-raised unchanged; `agents.running.runtime` classifies them.

When the database is away (a storage error), what could not be stored is kept in this
process (`unsaved_history`) so the run, tried again once storage is back, continues from
it: a model turn that already returned is never paid for again, and a run whose final
answer came back re-reports it without calling the model.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    RetryPromptPart,
    ToolReturnPart,
    UserContent,
)
from pydantic_ai.models import Model
from pydantic_ai.tools import DeferredToolResults
from pydantic_ai.usage import RunUsage, UsageLimits
from sqlalchemy import ColumnElement
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.core import telemetry
from flotilla.agents.core.clock import Clock
from flotilla.agents.core.failures import is_storage_error
from flotilla.agents.core.lru import LRUCache
from flotilla.agents.reconciling.run_history import dump_messages, resumable, text_answer
from flotilla.agents.running import preemption
from flotilla.agents.running.answer_text import ShowText, can_stream, relay
from flotilla.agents.running.models import resolve_model
from flotilla.agents.running.preemption import TurnBoundary, check_pause
from flotilla.agents.tools.context import RunDeps, RunJob
from flotilla.agents.tools.journal import ResponseStore, ToolJournal, split_journal, with_journal
from flotilla.storage.db import Also, Database
from flotilla.storage.records import AgentRunRecord
from flotilla.storage.runs import save_run_statement
from flotilla.storage.usage import usage_insert


@dataclass(frozen=True, slots=True)
class RunLimits:
    """Per-run caps. `total_tokens` counts across resumes of the same run."""

    total_tokens: int | None = 200_000
    requests: int = 30
    tool_calls: int | None = 60
    timeout_s: float | None = 600.0

    def usage_limits(self) -> UsageLimits:
        return UsageLimits(
            request_limit=self.requests,
            tool_calls_limit=self.tool_calls,
            total_tokens_limit=self.total_tokens,
        )


DEFAULT_LIMITS = RunLimits()
# the caller's work in the transaction that closes a run (e.g. what it reads as the run
# ends), given the history that transaction stores
AtClose = Callable[[AsyncConnection, Sequence[ModelMessage]], Awaitable[None]]
# run key -> the history a storage outage kept from being stored (this process only)
_UNSAVED: LRUCache[str, list[ModelMessage]] = LRUCache(1000)


def unsaved_history(run_key: str, stored: list[ModelMessage] | None) -> list[ModelMessage] | None:
    """The newer of a run's stored history and the one this process could not store,
    ready to continue from (`resumable`)."""
    unsaved = _UNSAVED.get(run_key)
    if unsaved is not None and len(unsaved) >= len(stored or []):
        return resumable(unsaved)
    return resumable(stored) if stored is not None else None


class RunSession:
    """Stores one run's history and the tokens it spent, after each model turn."""

    def __init__(
        self,
        db: Database,
        job: RunJob,
        agent_name: str,
        model: str,
        now: Clock,
        previous: AgentRunRecord | None = None,
        yields: TurnBoundary | None = None,
    ) -> None:
        self.db, self.job, self.agent_name, self.model, self.now = db, job, agent_name, model, now
        # how a scheduled run gives its slot to urgent work at a model-turn boundary
        self.yields = yields
        # tokens of this session already stored with its history and in the usage ledger
        self.recorded = (previous.input_tokens, previous.output_tokens) if previous else (0, 0)
        self.usage = RunUsage(input_tokens=self.recorded[0], output_tokens=self.recorded[1])
        # the history as last seen, and the returns of its last response's finished tool calls
        self.messages: list[ModelMessage] = []
        self.journal: dict[str, ToolReturnPart] = {}
        self._writing = asyncio.Lock()  # tool calls of one response finish concurrently
        # the last model response is not stored yet (`store_response` before a tool runs)
        self._response_unstored = False
        self._storing_response = asyncio.Lock()  # … and its tools start concurrently

    async def drive(
        self,
        agent: Agent[Any, Any],
        model: Model | str,
        deps: Any,
        limits: RunLimits,
        *,
        prompt: str | Sequence[UserContent] | None,
        history: list[ModelMessage] | None,
        deferred: DeferredToolResults | None,
        show: ShowText | None = None,
    ) -> tuple[Any, list[ModelMessage]]:
        """Run `agent` to its end, saving the history whenever it grows.

        A history that ends with a request (tool returns not sent yet) continues by sending
        it; one that ends with journaled tool returns continues the response's tool calls,
        answering the finished ones from their stored returns. Returns the output and the
        full history. On failure the run is stored as `failed` (with the tokens it spent and
        the tool returns it has) and the exception is re-raised as it came. With `show`
        (and a model that streams) each model response is streamed, and `show` sees its
        answer text as it grows (a preview: the output is still the validated result).
        """
        pending, self.journal = split_journal(history or [])
        self.messages = messages = list(pending)
        self._response_unstored = False
        saved = len(messages)
        # a new run's first request (its prompt) is stored with the response to it: a run
        # killed before that response is stored starts afresh, as one killed before its claim
        fresh = prompt is not None and not pending and deferred is None
        answer = text_answer(pending) if prompt is None and deferred is None else None
        if answer is not None:  # resumed after its answer came back: nothing to ask again
            return answer, messages
        resolved = telemetry.measured(resolve_model(model) if isinstance(model, str) else model)
        streaming = show is not None and can_stream(resolved)
        journal = ToolJournal(
            write=self.record_tool_return,
            stored=dict(self.journal),
            before=self.store_response,
            # SQLite only: its write transactions run one at a time, so the history a tool's
            # write stores (built inside it) is never older than a concurrent tool's save
            # committed after it; PostgreSQL's run side by side (`save` is serialised by
            # `_writing` instead, which a tool's transaction does not hold)
            response_store=self._response_store if self.db.writes_one_at_a_time else None,
            response_stores=deps.response_stores if isinstance(deps, RunDeps) else {},
        )
        try:
            async with agent.iter(
                prompt,
                message_history=pending or None,
                deferred_tool_results=deferred,
                deps=deps,
                model=resolved,
                usage_limits=limits.usage_limits(),
                # the session's earlier tokens count against this drive's limits too
                usage=RunUsage(input_tokens=self.recorded[0], output_tokens=self.recorded[1]),
                timeout=limits.timeout_s,
                capabilities=[journal],
            ) as run:
                async for node in run:
                    messages = list(run.all_messages())
                    journaled = held = False
                    if Agent.is_model_request_node(node) and node.request.parts:
                        # the request about to be sent (e.g. tool returns) is stored first –
                        # unless the journal stored exactly its returns already, or it is a
                        # new run's prompt (stored with its response)
                        journaled = _all_journaled(node.request, self.journal, journal.rerunnable)
                        messages.append(node.request)
                        self.journal = {}
                        held, fresh = fresh, False
                    self.messages, self.usage = messages, run.usage
                    boundary = Agent.is_model_request_node(node)  # all paid for is stored
                    looked = False  # for urgent work at this boundary
                    if journaled or Agent.is_end_node(node):
                        saved = len(messages)  # the end: `close` stores it with its status
                        self._response_unstored = False
                    elif Agent.is_call_tools_node(node) and len(messages) > saved:
                        # a response: stored before its first tool runs (`store_response`),
                        # else with the next request – or, as the run's answer, by `close`
                        self._response_unstored = True
                    elif len(messages) > saved and not held:
                        await self.save("running", messages, boundary=boundary)
                        saved, looked = len(messages), boundary
                    if Agent.is_model_request_node(node):
                        if not looked:
                            await self.give_way_if_wanted()
                        check_pause(self.yields)  # a model-turn boundary: yielded?
                        if streaming and show is not None:
                            async with node.stream(run.ctx) as events:
                                await relay(events, show)
                assert run.result is not None
                self.usage, self.journal = run.usage, {}
                return run.result.output, list(run.result.all_messages())
        except Exception as exc:
            if is_storage_error(exc):  # nothing can be stored now: keep it for the retry
                self._keep_unsaved(messages)
                raise
            await self.close("failed", messages)
            raise

    def _keep_unsaved(self, messages: Sequence[ModelMessage]) -> None:
        _UNSAVED.put(self.job.run_key, list(with_journal(messages, self.journal)))

    async def store_response(self) -> None:
        """Store the last model response before the first of its tool calls runs (each
        waits for it): a run that dies in a tool continues from that response without
        paying for it again. A response whose only calls are output tools (or none: the
        run's answer) reaches no tool: `close` stores it with the run's status, one write
        where there were two, with no call of any kind between them."""
        async with self._storing_response:
            if self._response_unstored:
                await self.save("running", self.messages)
                self._response_unstored = False

    def _response_store(self) -> ResponseStore:
        """`store_response` for a tool that writes: in the tool's own transaction."""

        async def write_in(conn: AsyncConnection) -> None:
            if self._response_unstored:
                await self._save(conn, "running", self.messages)

        def committed() -> None:
            self._response_unstored = False

        return ResponseStore(write_in, committed)

    async def record_tool_return(self, part: ToolReturnPart) -> None:
        """Store one finished tool call's return at once, after the response that made the call."""
        self.journal[part.tool_call_id] = part
        await self.save("running", self.messages)

    async def save(
        self,
        status: str,
        messages: Sequence[ModelMessage],
        also: Also | None = None,
        *,
        boundary: bool = False,
    ) -> None:
        """Store `messages` (with the journaled tool returns) and the tokens spent since
        (`also`: more work of the caller's in the same transaction); a scheduled run looks
        for urgent work in the same transaction and, at a model-turn `boundary`, gives its
        slot way to it there (`agents/running/preemption.py`)."""
        async with self._writing:
            asking = preemption.question(self.yields) if status == "running" else None
            async with self.db.write() as conn:
                wanted = await self._save(conn, status, messages, asking)
                if also is not None:
                    await also(conn)
                if status == "running":
                    answered = None if asking is None else bool(wanted)
                    await preemption.at_stored_turn(
                        self.yields, conn, boundary=boundary, wanted=answered
                    )
            preemption.committed(self.yields)

    async def give_way_if_wanted(self) -> None:
        """A boundary with nothing new to store: when the last stored turn saw urgent work
        waiting, the hand-over is tried in a transaction of its own."""
        if preemption.wants_to_give_way(self.yields):
            async with self._writing:
                async with self.db.write() as conn:
                    await preemption.at_stored_turn(self.yields, conn, boundary=True)
                preemption.committed(self.yields)

    async def close(
        self, status: str, messages: Sequence[ModelMessage], also: AtClose | None = None
    ) -> None:
        """Store the session's final status (and any tokens not recorded yet); when storage
        is away the history is kept in this process for the retry. `also`: what the caller
        reads (or writes) as the run ends, in the same transaction."""
        at_close: Also | None = None
        if also is not None:
            at_close = lambda conn: also(conn, messages)  # noqa: E731 - the history given
        try:
            await self.save(status, messages, at_close)
        except Exception as exc:
            if is_storage_error(exc):
                self._keep_unsaved(messages)
            raise
        _UNSAVED.pop(self.job.run_key)

    async def _save(
        self,
        conn: AsyncConnection,
        status: str,
        messages: Sequence[ModelMessage],
        asking: ColumnElement[Any] | None = None,
    ) -> Any:
        """History and the tokens spent since the last save, in one transaction (crash-safe);
        `asking`: a question the history's statement answers too (returned)."""
        *usage, run = self._writes(status, messages, conn.dialect.name)
        for entry in usage:
            await conn.execute(entry)
        answer = None
        if asking is None:
            await conn.execute(run)
        else:
            answer = await conn.scalar(run.returning(asking))
        self._recorded()
        return answer

    def close_statements(self, messages: Sequence[ModelMessage]) -> list[Any]:
        """`close` as "finished", as statements a caller's unit of work writes (a commander
        turn's, with the plan it starts); `closed` once that committed."""
        return self._writes("finished", messages, self.db.engine.dialect.name)

    def closed(self) -> None:
        """The transaction that wrote `close_statements` committed: the session is stored
        closed."""
        self._recorded()
        _UNSAVED.pop(self.job.run_key)

    def _writes(self, status: str, messages: Sequence[ModelMessage], dialect: str) -> list[Any]:
        """The statements of a save: the tokens spent since the last (a ledger row, if
        any), then the history."""
        writes: list[Any] = []
        spent_in = self.usage.input_tokens - self.recorded[0]
        spent_out = self.usage.output_tokens - self.recorded[1]
        if spent_in or spent_out:
            telemetry.count_tokens(
                self.job.team_id, self.agent_name, self.model, spent_in, spent_out
            )
            writes.append(
                usage_insert(
                    team_id=self.job.team_id,
                    channel_id=self.job.channel_id,
                    plan_id=self.job.plan_id,
                    step_index=self.job.step_index,
                    agent_name=self.agent_name,
                    model=self.model,
                    input_tokens=spent_in,
                    output_tokens=spent_out,
                    now=self.now(),
                )
            )
        writes.append(
            save_run_statement(
                dialect,
                run_key=self.job.run_key,
                agent_name=self.agent_name,
                model=self.model,
                status=status,
                messages=dump_messages(with_journal(messages, self.journal)),
                now=self.now(),
                conversation_id=self.job.conversation_id,
                plan_id=self.job.plan_id,
                step_index=self.job.step_index,
                input_tokens=self.usage.input_tokens,
                output_tokens=self.usage.output_tokens,
            )
        )
        return writes

    def _recorded(self) -> None:
        self.recorded = (self.usage.input_tokens, self.usage.output_tokens)


@dataclass(frozen=True, slots=True)
class PendingClose:
    """A finished run whose close is left to its caller: written in the caller's own
    unit of work (`statements`, then `committed`), or else on its own (`close`)."""

    session: RunSession
    messages: Sequence[ModelMessage]

    def statements(self) -> list[Any]:
        """The close as statements, for a unit of work that writes it (`committed` once it
        committed)."""
        return self.session.close_statements(self.messages)

    def committed(self) -> None:
        self.session.closed()

    async def close(self) -> None:
        await self.session.close("finished", self.messages)


def _all_journaled(
    request: ModelRequest, journal: dict[str, ToolReturnPart], rerunnable: set[str]
) -> bool:
    """Whether every part of `request` is a tool return the journal has stored, or answers
    a call of a rerunnable tool (then the stored history resumes to the same request, or
    to calls that run again at no cost: storing it now changes nothing)."""
    return bool(journal or rerunnable) and all(
        (isinstance(part, ToolReturnPart) and part.tool_call_id in journal)
        or (isinstance(part, ToolReturnPart | RetryPromptPart) and part.tool_call_id in rerunnable)
        for part in request.parts
    )
