"""An MCP server on loopback (the `mcp` package, streamable HTTP) gives an agent a tool;
an agent without that tool in its allow-list cannot call it."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.core.errors import PermanentError
from flotilla.agents.running.runtime import RunJob, StepRunResult, run_step
from flotilla.agents.tools.files import FILE_TOOLS
from flotilla.agents.tools.mcp import PUBLIC_NO_MCP
from flotilla.agents.tools.registry import AgentSpec, McpServerSpec
from flotilla.storage.db import Database

CALLS: list[str] = []


@pytest.fixture
async def mcp_url() -> AsyncIterator[str]:
    server = MCPServer("prices")
    CALLS.clear()

    @server.tool()
    def list_price(product: str) -> str:
        """The list price of a product."""
        CALLS.append(product)
        return f"{product}: 42 EUR"

    @server.tool()
    def delete_everything() -> str:
        """A tool no agent should get by accident."""
        return "deleted"

    # bind first, so the URL is known and connections queue until uvicorn serves
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve(sockets=[sock]))
    yield f"http://127.0.0.1:{port}/mcp"
    web.should_exit = True
    await asyncio.wait_for(task, timeout=10)
    sock.close()


def agent(url: str, allowed: tuple[str, ...]) -> AgentSpec:
    return AgentSpec(
        "researcher",
        "Researcher",
        "finds prices",
        "You research.",
        mcp_servers=(McpServerSpec(url=url, allowed_tools=allowed),),
    )


def calling(tool: str, seen: list[set[str]]) -> FunctionModel:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append({t.name for t in info.function_tools} - set(FILE_TOOLS))
        last = messages[-1].parts
        if not any(isinstance(p, ToolReturnPart) for p in last):
            return ModelResponse(parts=[ToolCallPart(tool, {"product": "Pro"})])
        content = next(p for p in last if isinstance(p, ToolReturnPart)).content
        return ModelResponse(parts=[TextPart(f"tool said: {content}")])

    return FunctionModel(script)


def job(key: str) -> RunJob:
    return RunJob(run_key=key, team_id="T1", input="What does Pro cost?")


async def test_an_allowed_mcp_tool_is_offered_and_called(db: Database, mcp_url: str) -> None:
    seen: list[set[str]] = []

    result = await run_step(
        db, job("mcp:1"), agent(mcp_url, ("list_price",)), model=calling("list_price", seen)
    )

    assert isinstance(result, StepRunResult)
    assert result.message == "tool said: Pro: 42 EUR"
    assert "list_price" in seen[0] and "delete_everything" not in seen[0]
    assert CALLS == ["Pro"]


async def test_a_tool_outside_the_allow_list_cannot_be_called(db: Database, mcp_url: str) -> None:
    seen: list[set[str]] = []

    result = await run_step(
        db, job("mcp:2"), agent(mcp_url, ("delete_everything",)), model=calling("list_price", seen)
    )

    assert "list_price" not in seen[0]
    assert isinstance(result, StepRunResult)
    # the call by name was answered as an unknown tool, never run on the server
    assert "42 EUR" not in result.message and "list_price" in result.message
    assert CALLS == []


async def test_a_server_without_an_allow_list_gives_no_tools(db: Database, mcp_url: str) -> None:
    seen: list[set[str]] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> Any:
        seen.append({t.name for t in info.function_tools} - set(FILE_TOOLS))  # always there
        return ModelResponse(parts=[TextPart("no tools")])

    await run_step(db, job("mcp:3"), agent(mcp_url, ()), model=FunctionModel(script))
    assert seen == [set()]


async def test_an_mcp_server_without_the_mcp_extra_fails_the_step_saying_what_to_install(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # as where `flotilla[mcp]` is not installed
    answered: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> Any:
        answered.append("called")
        return ModelResponse(parts=[TextPart("no tools")])

    spec = agent("http://127.0.0.1:9/mcp", ("list_price",))  # never reached
    with pytest.raises(PermanentError) as failed:
        await run_step(db, job("mcp:4"), spec, model=FunctionModel(script))
    assert failed.value.detail == (
        "agent researcher has MCP servers, but Flotilla's MCP support is not installed: "
        "pip install 'flotilla[mcp]' (or remove the agent's MCP servers)."
    )
    assert failed.value.public == PUBLIC_NO_MCP and not failed.value.retryable
    assert answered == []  # no model call was paid for
    # an agent whose servers allow no tool needs no MCP client
    await run_step(
        db, job("mcp:5"), agent("http://127.0.0.1:9/mcp", ()), model=FunctionModel(script)
    )
    assert answered == ["called"]
