"""A tool's result is never paid twice: tool returns are stored as they happen, and every tool
call carries an idempotency key derived from the run key and the tool call id.

A crash is a `BaseException` raised inside the run (nothing in the run handles it) or the run's
task cancelled; the same `run_key` is then run again, as a restarted process would.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from ipaddress import ip_network
from typing import Any

import pytest
import uvicorn
from aiohttp import web
from mcp.server.mcpserver import Context, MCPServer
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import FunctionToolset
from sqlalchemy import select

from flotilla.agents.running.runtime import RunJob, StepRunResult, run_step
from flotilla.agents.tools.context import IDEMPOTENCY_META_KEY, tool_call_key
from flotilla.agents.tools.net_guard import FetchPolicy
from flotilla.agents.tools.registry import AgentSpec, McpServerSpec
from flotilla.storage.db import Database
from flotilla.storage.runs import load_run
from flotilla.storage.usage import usage_t

SPEC = AgentSpec("researcher", "Researcher", "", "You research.")


class Crash(BaseException):
    """Stands for the process dying: not an Exception, so nothing in the run handles it."""


def job(key: str, text: str = "Charge the customer") -> RunJob:
    return RunJob(run_key=key, team_id="T1", input=text, channel_id="C1")


def final(message: str) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart("final_result", {"message": message, "summary": ""})])


def returns_of(messages: list[ModelMessage]) -> dict[str, Any]:
    last = messages[-1]
    return {
        p.tool_name: p.content
        for p in last.parts
        if isinstance(p, ToolReturnPart) and p.tool_name != "final_result"
    }


async def stored_run(db: Database, key: str) -> Any:
    async with db.read() as conn:
        return await load_run(conn, key)


async def ledger(db: Database) -> list[tuple[int, int]]:
    async with db.read() as conn:
        rows = (await conn.execute(select(usage_t.c.input_tokens, usage_t.c.output_tokens))).all()
    return [(int(i), int(o)) for i, o in rows]


def totals(rows: list[tuple[int, int]]) -> tuple[int, int]:
    return sum(i for i, _ in rows), sum(o for _, o in rows)


# --- a crash between the tool's return and the next model turn ------------------------------


async def test_a_tool_that_returned_is_not_run_again_after_a_crash(db: Database) -> None:
    charges: list[int] = []

    def charge(amount: int) -> str:
        """Charge the customer (a side effect that must happen once)."""
        charges.append(amount)
        return f"charged {amount}"

    tools = FunctionToolset([charge])

    def before_crash(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if isinstance(messages[-1].parts[0], UserPromptPart):
            return ModelResponse(parts=[ToolCallPart("charge", {"amount": 42})])
        raise Crash()  # the tool returned; the process dies before the next model turn

    run = job("durable:1")
    with pytest.raises(Crash):
        await run_step(db, run, SPEC, model=FunctionModel(before_crash), toolsets=[tools])
    assert charges == [42]
    stored = await stored_run(db, run.run_key)
    assert stored.status == "running"
    # the tool's return is stored: the history ends with the request about to be sent
    assert [m["kind"] for m in stored.messages] == ["request", "response", "request"]
    assert [p["content"] for p in stored.messages[-1]["parts"]] == ["charged 42"]
    assert len(await ledger(db)) == 1  # one model turn, one ledger entry

    seen: list[dict[str, Any]] = []

    def after_restart(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert not isinstance(messages[-1].parts[0], UserPromptPart), "the run started over"
        seen.append(returns_of(messages))
        return final("Charged 42 once.")

    result = await run_step(db, run, SPEC, model=FunctionModel(after_restart), toolsets=[tools])

    assert isinstance(result, StepRunResult) and result.message == "Charged 42 once."
    assert charges == [42], "the tool ran again on resume"
    assert seen == [{"charge": "charged 42"}]
    finished = await stored_run(db, run.run_key)
    rows = await ledger(db)
    # usage exactly once: one entry per model turn that answered, matching the stored run
    assert len(rows) == 2
    assert totals(rows) == (finished.input_tokens, finished.output_tokens)
    assert finished.input_tokens > stored.input_tokens


async def test_a_response_is_stored_before_its_first_tool_runs(db: Database) -> None:
    """The response that calls tools is stored before any of them starts (calls of one
    response start together: each waits for that one write), so a crash inside a tool
    continues from the stored response without paying for it again. The answer that ends
    the run calls no tool and is stored by the close alone."""
    run = job("durable:3", "Weather in two cities")
    seen: list[list[str]] = []
    crashed: list[bool] = []

    async def weather(city: str) -> str:
        """The weather in a city."""
        stored = await stored_run(db, run.run_key)
        seen.append([m["kind"] for m in stored.messages] if stored is not None else [])
        if not crashed:
            crashed.append(True)
            raise Crash()  # the process dies inside the first call, before any return
        return f"sunny in {city}"

    tools = FunctionToolset([weather])
    turns: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if isinstance(messages[-1].parts[0], UserPromptPart):
            turns.append("calls")
            return ModelResponse(
                parts=[
                    ToolCallPart("weather", {"city": "Oslo"}),
                    ToolCallPart("weather", {"city": "Rome"}),
                ]
            )
        turns.append("answer")
        return final("Sunny in both.")

    with pytest.raises(Crash):
        await run_step(db, run, SPEC, model=FunctionModel(script), toolsets=[tools])
    assert seen and seen[0] == ["request", "response"]  # stored before the tool started
    seen.clear()
    result = await run_step(db, run, SPEC, model=FunctionModel(script), toolsets=[tools])

    assert isinstance(result, StepRunResult) and result.message == "Sunny in both."
    assert turns == ["calls", "answer"]  # the response that called the tools: paid once
    # both calls ran again (neither had returned), each after the response was stored
    assert len(seen) == 2 and all(kinds[:2] == ["request", "response"] for kinds in seen)
    finished = await stored_run(db, run.run_key)
    assert finished.status == "finished"
    assert totals(await ledger(db)) == (finished.input_tokens, finished.output_tokens)


async def test_each_tool_return_is_stored_as_it_completes(db: Database) -> None:
    """Two calls in one response: the first one's return is stored before the second ends."""
    ran: list[str] = []

    async def reserve(seat: str) -> str:
        """Reserve a seat."""
        ran.append(f"reserve {seat}")
        return f"reserved {seat}"

    async def pay(seat: str) -> str:
        """Pay for a seat."""
        ran.append(f"pay {seat}")
        if ran.count(f"pay {seat}") == 1:
            raise Crash()  # the process dies while the second tool runs
        return f"paid {seat}"

    # sequential: `reserve` finishes before `pay` starts, so the crash point is deterministic
    tools = FunctionToolset([reserve, pay], sequential=True)
    answers: list[dict[str, Any]] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if isinstance(messages[-1].parts[0], UserPromptPart):
            return ModelResponse(
                parts=[
                    ToolCallPart("reserve", {"seat": "12A"}),
                    ToolCallPart("pay", {"seat": "12A"}),
                ]
            )
        answers.append(returns_of(messages))
        return final("Seat 12A is yours.")

    run = job("durable:2", "Book seat 12A")
    with pytest.raises(Crash):
        await run_step(db, run, SPEC, model=FunctionModel(script), toolsets=[tools])
    assert ran == ["reserve 12A", "pay 12A"]
    stored = await stored_run(db, run.run_key)
    # the finished call's return is in the stored history, the unfinished one's is not
    assert stored.messages[-1]["kind"] == "request"
    assert [p["content"] for p in stored.messages[-1]["parts"]] == ["reserved 12A"]

    result = await run_step(db, run, SPEC, model=FunctionModel(script), toolsets=[tools])

    assert isinstance(result, StepRunResult) and result.message == "Seat 12A is yours."
    # `reserve` answered from its stored return; only the unfinished `pay` ran again
    assert ran == ["reserve 12A", "pay 12A", "pay 12A"]
    assert answers == [{"reserve": "reserved 12A", "pay": "paid 12A"}]
    finished = await stored_run(db, run.run_key)
    assert totals(await ledger(db)) == (finished.input_tokens, finished.output_tokens)
    # the finished history is a plain one: no journal left behind, every call answered once
    kinds = [(m["kind"], [p["part_kind"] for p in m["parts"]]) for m in finished.messages[1:]]
    assert kinds == [
        ("response", ["tool-call", "tool-call"]),
        ("request", ["tool-return", "tool-return"]),
        ("response", ["tool-call"]),
        ("request", ["tool-return"]),
    ]


async def test_a_retry_the_tool_asked_for_is_stored_like_a_return(db: Database) -> None:
    ran: list[str] = []

    async def reserve(seat: str) -> str:
        """Reserve a seat."""
        ran.append("reserve")
        raise ModelRetry(f"{seat} was taken meanwhile; try another seat")

    async def pay(seat: str) -> str:
        """Pay for a seat."""
        ran.append("pay")
        if ran.count("pay") == 1:
            raise Crash()
        return f"paid {seat}"

    tools = FunctionToolset([reserve, pay], sequential=True)
    seen: list[list[tuple[str, str]]] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if isinstance(messages[-1].parts[0], UserPromptPart):
            calls = [ToolCallPart(name, {"seat": "12A"}) for name in ("reserve", "pay")]
            return ModelResponse(parts=calls)
        returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        seen.append([(p.outcome, str(p.content)) for p in returned])
        return final("12A was taken.")

    run = job("durable:3", "Book seat 12A")
    with pytest.raises(Crash):
        await run_step(db, run, SPEC, model=FunctionModel(script), toolsets=[tools])
    await run_step(db, run, SPEC, model=FunctionModel(script), toolsets=[tools])

    assert ran == ["reserve", "pay", "pay"]  # the retried call's side effects happened once
    assert seen == [
        [("retried", "12A was taken meanwhile; try another seat"), ("success", "paid 12A")]
    ]


# --- idempotency keys ---------------------------------------------------------------------


def test_tool_call_keys_are_deterministic_and_distinct() -> None:
    key = tool_call_key("plan:1:step:2:attempt:1", "call_a")
    assert key == tool_call_key("plan:1:step:2:attempt:1", "call_a")
    assert key != tool_call_key("plan:1:step:2:attempt:1", "call_b")
    assert key != tool_call_key("plan:1:step:2:attempt:2", "call_a")
    # the separator is unambiguous: moving characters between the two parts changes the key
    assert tool_call_key("a:", "b") != tool_call_key("a", ":b")
    assert key.isascii() and 16 <= len(key) <= 64


class Site:
    """A loopback HTTP server that records the `Idempotency-Key` of every request."""

    def __init__(self) -> None:
        self.keys: list[tuple[str, str | None]] = []
        self.first_arrived = asyncio.Event()
        self.hold_first = True
        self.url = ""

    async def page(self, request: web.Request) -> web.Response:
        self.keys.append((request.path, request.headers.get("Idempotency-Key")))
        if request.path == "/order" and self.hold_first:
            self.hold_first = False
            self.first_arrived.set()
            await asyncio.Event().wait()  # the client dies while this request is in flight
        return web.Response(text=f"done {request.path}")


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    recorder = Site()
    app = web.Application()
    app.router.add_get("/{name}", recorder.page)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    recorder.url = f"http://127.0.0.1:{port}"
    yield recorder
    await runner.cleanup()


# test-only: the site runs on loopback, which http_fetch refuses unless told otherwise
LOOPBACK = FetchPolicy(allow_networks=(ip_network("127.0.0.1/32"),))


def fetch_spec() -> AgentSpec:
    return AgentSpec(
        "researcher",
        "Researcher",
        "",
        "research",
        tools=("http_fetch",),
        http_domains=("127.0.0.1",),
    )


async def test_a_retried_fetch_sends_the_same_idempotency_key(db: Database, site: Site) -> None:
    call_ids: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = returns_of(messages)
        if not returned:
            call = ToolCallPart("http_fetch", {"url": f"{site.url}/order"})
            call_ids.append(call.tool_call_id)
            return ModelResponse(parts=[call])
        if "/order" in str(returned.get("http_fetch")):
            call = ToolCallPart("http_fetch", {"url": f"{site.url}/receipt"})
            call_ids.append(call.tool_call_id)
            return ModelResponse(parts=[call])
        return ModelResponse(parts=[TextPart("ordered and got the receipt")])

    run = job("fetch:1", "Place the order")
    first = asyncio.create_task(
        run_step(db, run, fetch_spec(), model=FunctionModel(script), fetch_policy=LOOPBACK)
    )
    await asyncio.wait_for(site.first_arrived.wait(), timeout=10)
    first.cancel()  # the process dies while the fetch is in flight
    with pytest.raises(asyncio.CancelledError):
        await first

    result = await run_step(
        db, run, fetch_spec(), model=FunctionModel(script), fetch_policy=LOOPBACK
    )

    assert isinstance(result, StepRunResult) and result.message == "ordered and got the receipt"
    order_key = tool_call_key(run.run_key, call_ids[0])
    receipt_key = tool_call_key(run.run_key, call_ids[1])
    assert len(call_ids) == 2 and order_key != receipt_key
    # the same tool call, fetched again after the crash, carries the same key
    assert site.keys == [("/order", order_key), ("/order", order_key), ("/receipt", receipt_key)]


# --- MCP ------------------------------------------------------------------------------------


class McpServerUnderTest:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.url = ""


@pytest.fixture
async def mcp_server() -> AsyncIterator[McpServerUnderTest]:
    recorder = McpServerUnderTest()
    server = MCPServer("orders")

    @server.tool()
    def place_order(product: str, ctx: Context) -> str:
        """Place an order."""
        meta = ctx.request_context.meta or {}
        recorder.calls.append((product, dict(meta).get(IDEMPOTENCY_META_KEY)))
        return f"ordered {product}"

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    web_server = uvicorn.Server(config)
    task = asyncio.create_task(web_server.serve(sockets=[sock]))
    recorder.url = f"http://127.0.0.1:{port}/mcp"
    yield recorder
    web_server.should_exit = True
    await asyncio.wait_for(task, timeout=10)
    sock.close()


async def test_mcp_tool_calls_carry_the_idempotency_key_and_run_once(
    db: Database, mcp_server: McpServerUnderTest
) -> None:
    spec = AgentSpec(
        "buyer",
        "Buyer",
        "",
        "You buy.",
        mcp_servers=(McpServerSpec(url=mcp_server.url, allowed_tools=("place_order",)),),
    )
    call_ids: list[str] = []
    crash = [True]

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if not returned:
            calls = [ToolCallPart("place_order", {"product": p}) for p in ("Pro", "Team")]
            call_ids.extend(c.tool_call_id for c in calls)
            return ModelResponse(parts=calls)
        if crash:
            crash.clear()
            raise Crash()  # both orders placed; the process dies before the next model turn
        return ModelResponse(parts=[TextPart(" and ".join(str(p.content) for p in returned))])

    run = job("mcp-key:1", "Buy Pro and Team")
    with pytest.raises(Crash):
        await run_step(db, run, spec, model=FunctionModel(script))
    result = await run_step(db, run, spec, model=FunctionModel(script))

    assert isinstance(result, StepRunResult) and result.message == "ordered Pro and ordered Team"
    # each order placed once, each with its own call's key in the request's `_meta`
    assert sorted(mcp_server.calls) == [
        ("Pro", tool_call_key(run.run_key, call_ids[0])),
        ("Team", tool_call_key(run.run_key, call_ids[1])),
    ]
