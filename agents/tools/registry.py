"""The sub-agent registry: typed `AgentSpec`s over the `agents` table, and first-start seeds.

Tool configuration lives in the agent row's `tools` list:

- `"ask_user"`, `"read_thread"` – built-in tools, on or off;
- `"http_fetch:<domain>"` – enables `http_fetch` for that domain (and its subdomains); one
  entry per allowed domain. A bare `"http_fetch"` enables the tool with no domain allowed.

`mcp_servers` is a list of `{"url": "http://…/mcp", "tools": ["name", …]}`: a streamable-HTTP
MCP server and the tools of it this agent may call. A server without `"tools"` gives no
tools (deny by default); `["*"]` allows all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.agents import create_agent, get_agent, list_agents
from flotilla.storage.records import AgentRecord
from flotilla.storage.sql import DuplicateError

BUILTIN_TOOLS = ("ask_user", "read_thread", "http_fetch")
HTTP_FETCH_PREFIX = "http_fetch:"


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    url: str
    allowed_tools: tuple[str, ...] = ()

    def allows(self, tool_name: str) -> bool:
        return "*" in self.allowed_tools or tool_name in self.allowed_tools


@dataclass(frozen=True, slots=True)
class AgentSpec:
    """What a run needs to know about an agent (no tokens: identity secrets stay in storage)."""

    name: str
    display_name: str
    description: str
    system_prompt: str
    model: str | None = None
    icon: str = ""
    tools: tuple[str, ...] = ()
    mcp_servers: tuple[McpServerSpec, ...] = ()
    http_domains: tuple[str, ...] = ()
    identity: str = "persona"
    enabled: bool = True

    def has_tool(self, name: str) -> bool:
        return name in self.tools


def spec_from_record(record: AgentRecord) -> AgentSpec:
    """The typed spec of a stored agent; unknown tool names are ignored."""
    tools: list[str] = []
    domains: list[str] = []
    for entry in record.tools:
        if entry.startswith(HTTP_FETCH_PREFIX):
            domains.append(entry.removeprefix(HTTP_FETCH_PREFIX).strip().lower())
            entry = "http_fetch"
        if entry in BUILTIN_TOOLS and entry not in tools:
            tools.append(entry)
    servers = tuple(
        McpServerSpec(url=str(s["url"]), allowed_tools=tuple(str(t) for t in s.get("tools", [])))
        for s in record.mcp_servers
        if isinstance(s, dict) and s.get("url")
    )
    return AgentSpec(
        name=record.name,
        display_name=record.display_name,
        description=record.description,
        system_prompt=record.system_prompt,
        model=record.model,
        icon=record.icon,
        tools=tuple(tools),
        mcp_servers=servers,
        http_domains=tuple(d for d in domains if d),
        identity=record.identity,
        enabled=record.enabled,
    )


DEFAULT_AGENTS: tuple[dict[str, Any], ...] = (
    {
        "name": "researcher",
        "display_name": "Researcher",
        "icon": ":mag:",
        "description": "Finds facts, figures and sources on a topic and reports them concisely.",
        "system_prompt": (
            "You are the team's researcher. Find the facts the task asks for, say where each "
            "comes from, and separate what is known from what is assumed. Be concise."
        ),
        "tools": ["ask_user", "read_thread"],
    },
    {
        "name": "analyst",
        "display_name": "Analyst",
        "icon": ":bar_chart:",
        "description": "Compares options and numbers, finds patterns and draws conclusions.",
        "system_prompt": (
            "You are the team's analyst. Compare the material you are given, quantify where "
            "you can, and state clear conclusions with their caveats."
        ),
        "tools": ["ask_user", "read_thread"],
    },
    {
        "name": "writer",
        "display_name": "Writer",
        "icon": ":memo:",
        "description": "Drafts clear notes, summaries and announcements for people to read.",
        "system_prompt": (
            "You are the team's writer. Turn the material you are given into a clear, "
            "well-structured text for its audience. Keep it short and concrete."
        ),
        "tools": ["ask_user", "read_thread"],
    },
)


async def seed_default_agents(conn: AsyncConnection, team_id: str, now: datetime) -> list[str]:
    """On a workspace's first start (no agents at all), add the default agents.

    Returns the names added. Idempotent: a workspace with any agent is left alone, so
    defaults an admin removed or edited never come back.
    """
    if await list_agents(conn, team_id):
        return []
    added: list[str] = []
    for default in DEFAULT_AGENTS:
        fields = {k: v for k, v in default.items() if k != "name"}
        try:
            await create_agent(conn, team_id, default["name"], now, **fields)
        except DuplicateError:
            continue  # another replica seeded it in the meantime
        added.append(default["name"])
    return added


async def enabled_agents(conn: AsyncConnection, team_id: str) -> list[AgentSpec]:
    """The enabled sub-agents of a workspace, by name."""
    return [spec_from_record(r) for r in await list_agents(conn, team_id, enabled_only=True)]


async def get_agent_spec(conn: AsyncConnection, team_id: str, name: str) -> AgentSpec | None:
    record = await get_agent(conn, team_id, name)
    return spec_from_record(record) if record else None


async def enabled_agent_names(conn: AsyncConnection, team_id: str) -> list[str]:
    """Names a plan may assign steps to (besides "user" and "commander")."""
    return [a.name for a in await list_agents(conn, team_id, enabled_only=True)]
