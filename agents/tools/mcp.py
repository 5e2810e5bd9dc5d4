"""MCP toolsets of an agent: streamable-HTTP servers, each filtered by the agent's allow-list.

A tool not on the agent's list for that server is not shown to the model, so the model
cannot call it (a call by name anyway is answered as an unknown tool).

Every call carries the tool call's idempotency key in the request's `_meta`, under
`IDEMPOTENCY_META_KEY` (pydantic-ai's `process_tool_call` hook passes it as `metadata`).
Not an HTTP header: the connection, and so its headers, is shared by all calls of a run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset

from flotilla.agents.tools.context import IDEMPOTENCY_META_KEY, RunDeps, call_key
from flotilla.agents.tools.registry import AgentSpec, McpServerSpec

if TYPE_CHECKING:  # the MCP client stack takes seconds to import: only when an agent uses it
    from pydantic_ai.mcp import CallToolFunc, MCPToolset, ToolResult

MCP_TIMEOUT_S = 30.0


async def _with_idempotency_key(
    ctx: RunContext[RunDeps], call_tool: CallToolFunc, name: str, args: dict[str, Any]
) -> ToolResult:
    return await call_tool(name, args, metadata={IDEMPOTENCY_META_KEY: call_key(ctx)})


def _allow(server: McpServerSpec) -> Callable[[RunContext[RunDeps], ToolDefinition], bool]:
    def allowed(ctx: RunContext[RunDeps], tool: ToolDefinition) -> bool:
        return server.allows(tool.name)

    return allowed


def mcp_toolsets(spec: AgentSpec) -> list[AbstractToolset[RunDeps]]:
    """One filtered toolset per MCP server of `spec` that allows at least one tool."""
    toolsets: list[AbstractToolset[RunDeps]] = []
    for number, server in enumerate(spec.mcp_servers, start=1):
        if not server.allowed_tools:
            continue  # deny by default: nothing to offer, and no connection to make
        from pydantic_ai.mcp import MCPToolset  # lazily: see the TYPE_CHECKING import

        toolset: MCPToolset[RunDeps] = MCPToolset(
            server.url,
            id=f"{spec.name}-mcp-{number}",
            read_timeout=MCP_TIMEOUT_S,
            process_tool_call=_with_idempotency_key,
        )
        toolsets.append(toolset.filtered(_allow(server)))
    return toolsets
