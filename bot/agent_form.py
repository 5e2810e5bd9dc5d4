"""The agent form's values and their validation: pure, no I/O (but for a look at whether
MCP support is installed).

What an admin typed into the agent modal (`AgentDraft`), the problems per modal block
(name format, icon, a model string Flotilla can use, web-fetch domains, MCP servers and
whether this installation can use them), and the agents-table columns a valid draft sets.
Uniqueness and the bot token's `auth.test` need I/O and are checked in `bot/admin.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from flotilla.agents.planning.plan import COMMANDER, USER
from flotilla.agents.running.models import NO_KEYS, ModelSpecError, ProviderKeys, resolve_model
from flotilla.agents.tools.mcp import INSTALL_MCP, mcp_available
from flotilla.agents.tools.registry import HTTP_FETCH_PREFIX

NAME = re.compile(r"^[a-z][a-z0-9_-]{1,39}$")
RESERVED_NAMES = frozenset({USER, COMMANDER, "flotilla", "here", "channel", "everyone"})
EMOJI = re.compile(r"^:[a-z0-9_+'-]+:$")
DOMAIN = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
CHOOSABLE_TOOLS = ("ask_user", "read_thread")
NO_MCP = (
    "This Flotilla has no MCP support installed: ask its operator to run "
    f"{INSTALL_MCP}, or leave this empty."
)
Mode = Literal["add", "edit"]


@dataclass(frozen=True, slots=True)
class AgentDraft:
    """What an admin typed into the agent modal (not yet validated)."""

    name: str
    display_name: str = ""
    icon: str = ""
    description: str = ""
    system_prompt: str = ""
    model: str = ""
    tools: tuple[str, ...] = ()
    http_domains: str = ""
    mcp_servers: str = ""
    identity: str = "persona"
    bot_token: str = field(default="", repr=False)


def name_problem(name: str) -> str | None:
    if not NAME.match(name):
        return (
            "Use 2–40 characters: lowercase letters, digits, - or _, starting with a letter "
            "(e.g. researcher)."
        )
    if name in RESERVED_NAMES:
        return f"“{name}” is reserved; choose another name."
    return None


def parse_mcp_servers(text: str) -> tuple[list[dict[str, Any]], str | None]:
    """One server a line: `URL tool, tool` (or `URL *`); the config and a problem, if any."""
    servers: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        url, _, rest = line.strip().partition(" ")
        if not url:
            continue
        if not url.startswith(("http://", "https://")):
            return [], f"Line {number}: start with the server's http(s) URL."
        tools = [t for t in re.split(r"[,\s]+", rest) if t]
        if not tools:
            return [], f"Line {number}: after the URL, list the tools the agent may call (or *)."
        servers.append({"url": url, "tools": tools})
    return servers, None


def domains(text: str) -> list[str]:
    return [d.strip().lower() for d in re.split(r"[,\s]+", text) if d.strip()]


def draft_problems(draft: AgentDraft, mode: Mode, keys: ProviderKeys = NO_KEYS) -> dict[str, str]:
    """Errors per modal block that need no I/O: formats, lengths, the model string (and its
    provider key among `keys`, the settings' keys)."""
    errors: dict[str, str] = {}
    if mode == "add":
        problem = name_problem(draft.name)
        if problem:
            errors["name"] = problem
    if len(draft.display_name) > 80:
        errors["display_name"] = "Keep the display name to 80 characters."
    icon = draft.icon.strip()
    if icon and not (EMOJI.match(icon) or icon.startswith(("https://", "http://"))):
        errors["icon"] = "Use an emoji code like :mag: or an image URL (https://…)."
    if not draft.description.strip():
        errors["description"] = "Say what this agent does: the commander plans with it."
    if not draft.system_prompt.strip():
        errors["system_prompt"] = "Give the agent its instructions."
    errors.update(_tool_problems(draft, keys))
    if draft.identity not in ("persona", "app"):
        errors["identity"] = "Choose persona or own Slack app."
    if draft.bot_token and not draft.bot_token.strip().startswith("xoxb-"):
        errors["bot_token"] = "A bot token starts with xoxb-."
    return errors


def _tool_problems(draft: AgentDraft, keys: ProviderKeys) -> dict[str, str]:
    """The model string, web-fetch domains and MCP servers."""
    errors: dict[str, str] = {}
    if draft.model.strip():
        try:
            resolve_model(draft.model, keys)
        except ModelSpecError as exc:
            errors["model"] = str(exc)[:300]
    bad = [d for d in domains(draft.http_domains) if not DOMAIN.match(d)]
    if bad:
        errors["http_domains"] = f"Not a domain: {', '.join(bad)[:200]}"
    servers, problem = parse_mcp_servers(draft.mcp_servers)
    if problem:
        errors["mcp_servers"] = problem
    elif servers and not mcp_available():
        errors["mcp_servers"] = NO_MCP
    return errors


def agent_fields(draft: AgentDraft) -> dict[str, Any]:
    """The agents-table columns a valid draft sets (identity columns excepted)."""
    servers, _ = parse_mcp_servers(draft.mcp_servers)
    tools = [t for t in CHOOSABLE_TOOLS if t in draft.tools]
    tools += [f"{HTTP_FETCH_PREFIX}{d}" for d in domains(draft.http_domains)]
    return {
        "display_name": draft.display_name.strip() or draft.name,
        "icon": draft.icon.strip(),
        "description": draft.description.strip(),
        "system_prompt": draft.system_prompt.strip(),
        "model": draft.model.strip() or None,
        "tools": tools,
        "mcp_servers": servers,
    }
