"""MCP toolsets of an agent: streamable-HTTP servers, each filtered by the agent's allow-list.

A tool not on the agent's list for that server is not shown to the model, so the model
cannot call it (a call by name anyway is answered as an unknown tool).

Every call carries the tool call's idempotency key in the request's `_meta`, under
`IDEMPOTENCY_META_KEY` (pydantic-ai's `process_tool_call` hook passes it as `metadata`).
Not an HTTP header: the connection, and so its headers, is shared by all calls of a run.

The MCP client is Flotilla's optional `mcp` extra (`pip install 'flotilla[mcp]'`): it is
imported only when an agent has an MCP server, and an agent that has one where the extra is
missing fails its step with a sentence saying so (`MissingMcp`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic_ai import RunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset

from flotilla.agents.core.errors import PermanentError
from flotilla.agents.tools.context import IDEMPOTENCY_META_KEY, RunDeps, call_key
from flotilla.agents.tools.registry import AgentSpec, McpServerSpec

if TYPE_CHECKING:  # the MCP client stack takes seconds to import: only when an agent uses it
    from pydantic_ai.mcp import CallToolFunc, MCPToolset, ToolResult

MCP_TIMEOUT_S = 30.0
INSTALL_MCP = "pip install 'flotilla[mcp]'"
PUBLIC_NO_MCP = "I can't use the tools I was set up with here; an admin has been told."


class MissingMcp(PermanentError):
    """An agent has an MCP server, but the MCP client (the `mcp` extra) is not installed."""

    def __init__(self, agent: str) -> None:
        super().__init__(
            f"agent {agent} has MCP servers, but Flotilla's MCP support is not installed: "
            f"{INSTALL_MCP} (or remove the agent's MCP servers).",
            public=PUBLIC_NO_MCP,
        )


def mcp_available() -> bool:
    """Whether the MCP client is installed (found without importing it: that takes seconds)."""
    return importlib.util.find_spec("mcp") is not None


async def _with_idempotency_key(
    ctx: RunContext[RunDeps], call_tool: CallToolFunc, name: str, args: dict[str, Any]
) -> ToolResult:
    return await call_tool(name, args, metadata={IDEMPOTENCY_META_KEY: call_key(ctx)})


def _allow(server: McpServerSpec) -> Callable[[RunContext[RunDeps], ToolDefinition], bool]:
    def allowed(ctx: RunContext[RunDeps], tool: ToolDefinition) -> bool:
        return server.allows(tool.name)

    return allowed


def mcp_toolsets(spec: AgentSpec) -> list[AbstractToolset[RunDeps]]:
    """One filtered toolset per MCP server of `spec` that allows at least one tool; raises
    `MissingMcp` when there is one and the MCP client is not installed."""
    toolsets: list[AbstractToolset[RunDeps]] = []
    for number, server in enumerate(spec.mcp_servers, start=1):
        if not server.allowed_tools:
            continue  # deny by default: nothing to offer, and no connection to make
        if not mcp_available():
            raise MissingMcp(spec.name)
        try:
            from pydantic_ai.mcp import MCPToolset  # lazily: see the TYPE_CHECKING import
        except ImportError as exc:  # installed in part: the same advice
            raise MissingMcp(spec.name) from exc

        toolset: MCPToolset[RunDeps] = MCPToolset(
            server.url,
            id=f"{spec.name}-mcp-{number}",
            read_timeout=MCP_TIMEOUT_S,
            process_tool_call=_with_idempotency_key,
        )
        toolsets.append(toolset.filtered(_allow(server)))
    return toolsets
