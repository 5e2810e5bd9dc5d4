"""Tool returns stored as each call completes, so a resumed run never runs a finished call again.

While the tools of one model response run, their returns are collected into the request that
answers that response. `RunSession` stores that request after every completed call, marked
`state="interrupted"` – pydantic-ai's own form for "a request being assembled from tool
returns, not sent yet" – after the response it answers. A run resumed from such a history
gets the stored returns back (`split_journal`) and `ToolJournal` answers those calls from them
instead of calling the tool; only calls that had not finished run again, with the same
`tool_call_id` and so the same idempotency key. Once all calls are done, the complete request
replaces the journal in the stored history (see `agents/running/session.py`).

A tool marked rerunnable (`rerunnable_tool`: a call run again costs nothing and changes
nothing twice – the commander's plan tools, which only hand their value back; reading the
thread or a file; `write_file`, which records its file under the call's key) is not
journaled: its return goes into the history with the next model turn, and a run resumed
before that calls it again – one write less for each such call.

Why a capability (`wrap_tool_execute`) and not a toolset wrapper: it sees every function tool
call of the run, built-in, MCP or extra toolsets alike, with its `ToolCallPart`, and output
tools never reach it. A result that carries more than a return value (`ToolReturn` with
`content` for the model or `tools` to reveal) is not journaled: it would not replay exactly,
so such a call runs again if the run dies before the next model turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, ValidatedToolArgs, WrapToolExecuteHandler
from pydantic_ai.exceptions import ToolFailedError, ToolRetryError
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturn,
    ToolReturnPart,
)
from pydantic_ai.tools import Tool, ToolDefinition
from sqlalchemy.ext.asyncio import AsyncConnection

JournalWriter = Callable[[ToolReturnPart], Awaitable[None]]
RERUNNABLE = "rerunnable"  # the tool definition's metadata key: a call safe to run again
# … and a call that stores the response that made it in its own write (`response_store`)
STORES_RESPONSE = "stores_response"


@dataclass(slots=True)
class ResponseStore:
    """The response that made a tool call, not stored yet: a tool that writes (marked
    `STORES_RESPONSE`) stores it in its own transaction (`write_in`, then `committed`), one
    write where there were two; when the call wrote nothing (it refused its arguments),
    the session's own store follows it (`ToolJournal._storing_response`)."""

    write_in: Callable[[AsyncConnection], Awaitable[None]]
    committed: Callable[[], None]
    used: bool = False


# the calls running now whose response a tool's own write stores, by tool call id: the
# journal puts a call's store here while it runs, the tool finds it by its call's id (the
# run's deps hold the same map, `RunDeps.response_stores`)
ResponseStores = dict[str, ResponseStore]


async def store_response_in(
    conn: AsyncConnection, stores: ResponseStores, tool_call_id: str | None
) -> None:
    """In a tool's write transaction: the response that made the call `tool_call_id`, if it
    is not stored (`ResponseStore`); call `response_stored` once the transaction committed."""
    store = stores.get(tool_call_id or "")
    if store is not None:
        await store.write_in(conn)


def response_stored(stores: ResponseStores, tool_call_id: str | None) -> None:
    """The transaction `store_response_in` wrote in committed."""
    store = stores.get(tool_call_id or "")
    if store is not None:
        store.used = True
        store.committed()


def rerunnable_tool(tool: Tool[Any], *, stores_response: bool = False) -> Tool[Any]:
    """`tool` marked rerunnable: its calls are not journaled (see the module docstring);
    `stores_response`: it stores the response that made the call in its own write
    (`store_response_in`)."""
    marks = {RERUNNABLE: True} | ({STORES_RESPONSE: True} if stores_response else {})
    tool.metadata = {**(tool.metadata or {}), **marks}
    return tool


def split_journal(
    history: Sequence[ModelMessage],
) -> tuple[list[ModelMessage], dict[str, ToolReturnPart]]:
    """A stored history without its trailing journal, and the journaled returns by call id.

    The journal is a trailing `interrupted` request after a response with tool calls; without
    one the history comes back whole with no returns.
    """
    messages = list(history)
    if (
        len(messages) >= 2
        and isinstance(last := messages[-1], ModelRequest)
        and last.state == "interrupted"
        and isinstance(messages[-2], ModelResponse)
    ):
        calls = {call.tool_call_id for call in messages[-2].tool_calls}
        returns = {
            part.tool_call_id: part
            for part in last.parts
            if isinstance(part, ToolReturnPart) and part.tool_call_id in calls
        }
        return messages[:-1], returns
    return messages, {}


def with_journal(
    messages: Sequence[ModelMessage], returns: Mapping[str, ToolReturnPart]
) -> list[ModelMessage]:
    """`messages` as stored: the journal follows a response whose calls it answers."""
    stored = list(messages)
    if not returns or not stored or not isinstance(stored[-1], ModelResponse):
        return stored
    calls = [call.tool_call_id for call in stored[-1].tool_calls]
    parts = [returns[call_id] for call_id in calls if call_id in returns]
    if parts:
        stored.append(ModelRequest(parts=parts, state="interrupted"))
    return stored


def journal_part(call: ToolCallPart, result: Any) -> ToolReturnPart | None:
    """The return part a tool's result becomes in the history, if it can be replayed exactly."""
    if isinstance(result, ToolReturn):
        if result.content or result.tools is not None:
            return None
        content, metadata = result.return_value, result.metadata
    else:
        content, metadata = result, None
    return ToolReturnPart(
        tool_name=call.tool_name,
        content=content,
        tool_call_id=call.tool_call_id,
        metadata=metadata,
        tool_kind=call.tool_kind,
    )


def replay(part: ToolReturnPart) -> Any:
    """What the tool call gives pydantic-ai back, from its stored return part."""
    if part.outcome == "retried":
        raise ToolRetryError(part)
    if part.outcome == "failed":
        raise ToolFailedError(part)
    return ToolReturn(return_value=part.content, metadata=part.metadata)


@dataclass
class ToolJournal(AbstractCapability[Any]):
    """Answers a tool call from its stored return, or runs it and stores the return at once.

    `stored` are the returns a resumed run got back from its history (`split_journal`);
    `write` stores one new return (its own transaction) before the call counts as done.
    Retries and failures the tool asked for (`ModelRetry`, `ToolFailed`) are journaled too:
    the call's side effects may have happened before it gave up.
    """

    write: JournalWriter
    stored: Mapping[str, ToolReturnPart] = field(default_factory=dict)
    # awaited before a call that is not answered from the journal runs (the session stores
    # the response that made the call first, if it has not yet)
    before: Callable[[], Awaitable[None]] | None = None
    # a rerunnable tool that writes stores that response in its own write instead
    response_store: Callable[[], ResponseStore] | None = None
    # where such a tool finds its call's store (the run's deps hold the same map)
    response_stores: ResponseStores = field(default_factory=dict)
    # calls of rerunnable tools run (not journaled): their returns need not be stored
    rerunnable: set[str] = field(default_factory=set)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        stored = self.stored.get(call.tool_call_id)
        if stored is not None:
            return replay(stored)
        metadata = tool_def.metadata or {}
        if metadata.get(STORES_RESPONSE) and metadata.get(RERUNNABLE) and self.response_store:
            self.rerunnable.add(call.tool_call_id)
            store = self.response_store()
            return await self._storing_response(call.tool_call_id, store, handler, args)
        if self.before is not None:
            await self.before()
        if metadata.get(RERUNNABLE):
            self.rerunnable.add(call.tool_call_id)
            return await handler(args)  # run again if the run resumes before its next turn
        try:
            result = await handler(args)
        except ToolRetryError as exc:
            if isinstance(exc.tool_retry, ToolReturnPart):
                await self.write(exc.tool_retry)
            raise
        except ToolFailedError as exc:
            await self.write(exc.tool_failed)
            raise
        part = journal_part(call, result)
        if part is not None:
            await self.write(part)
        return result

    async def _storing_response(
        self,
        call_id: str,
        store: ResponseStore,
        handler: WrapToolExecuteHandler,
        args: ValidatedToolArgs,
    ) -> Any:
        """Run a rerunnable tool that stores the response in its own write; one that wrote
        nothing (it refused its arguments first) leaves it to the session's own store."""
        self.response_stores[call_id] = store
        try:
            return await handler(args)
        finally:
            self.response_stores.pop(call_id, None)
            if not store.used and self.before is not None:
                await self.before()

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # built per run from live state, never from a spec
