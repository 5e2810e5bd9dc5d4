"""Block Kit for administration: the agent modal (add/edit), `/flotilla` answers, App Home.

Pure functions of records; the modal's submitted state is parsed back into an
`AgentDraft` here too, so the block ids live in one place. A stored bot token is never
rendered: the edit modal only says that one is set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    CheckboxesElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    InputBlock,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    RadioButtonsElement,
    SectionBlock,
)
from slack_sdk.models.views import View

from flotilla.agents.tools.registry import HTTP_FETCH_PREFIX
from flotilla.bot.admin_reports import Reports
from flotilla.bot.agent_form import AgentDraft, Mode
from flotilla.bot.views.feedback import feedback_text
from flotilla.storage.records import AgentRecord, AuditRecord, FeedbackTotal, UsageTotal

AGENT_CALLBACK = "flotilla_agent_save"
ADD_AGENT_ACTION = "flotilla_agent_add"
SECTION_MAX = 3000
INPUT_MAX = 3000  # Slack's cap on a plain_text_input's max_length

HELP = """*Flotilla* – mention me in a channel with a request; I plan it and hand the steps \
to my agents.
`/flotilla help` – this text
`/flotilla agents` – the agents and what they do
`/flotilla plans` – plans that are running or waiting for someone
`/flotilla cancel [plan]` – cancel a plan (the one in this channel, or by number)
`/flotilla usage` – tokens used this month, per agent and per channel, and 👍/👎 per agent
`/flotilla model` – the model this workspace uses
`/flotilla queue` – what runs now, who waits for what, and why
`/flotilla quota` – capacity, agent and tool concurrency, weights, token budgets
Admins:
`/flotilla agent add NAME` · `agent edit NAME` – configure an agent in a form
`/flotilla agent enable NAME` · `agent disable NAME` · `agent remove NAME`
`/flotilla model MODEL` · `model default` – choose the workspace's model
`/flotilla audit` – who changed what, and when
`/flotilla quota agent NAME N` · `quota tool NAME N` · `quota capacity N` · \
`quota weight #channel W` · `quota budget channel_day N` – change a limit
`/flotilla urgent [plan]` · `batch [plan]` · `normal [plan]` – a plan's (or this channel's) \
priority"""

TOOL_OPTIONS = {
    "ask_user": "Ask people a question in the thread",
    "read_thread": "Read the thread",
}
IDENTITY_OPTIONS = {
    "persona": "Persona – Flotilla posts with the agent's name and icon",
    "app": "Own Slack app – the agent posts with its own bot token",
}


# --- the agent modal ----------------------------------------------------------------------


def _text_input(
    block_id: str,
    label: str,
    value: str = "",
    *,
    optional: bool = False,
    multiline: bool = False,
    hint: str | None = None,
    placeholder: str | None = None,
    max_length: int = INPUT_MAX,
) -> InputBlock:
    return InputBlock(
        block_id=block_id,
        label=PlainTextObject(text=label),
        optional=optional,
        hint=PlainTextObject(text=hint) if hint else None,
        element=PlainTextInputElement(
            action_id="value",
            initial_value=value[:max_length] or None,
            multiline=multiline,
            max_length=max_length,
            placeholder=PlainTextObject(text=placeholder) if placeholder else None,
        ),
    )


def _options(labels: Mapping[str, str]) -> list[Option]:
    return [
        Option(value=value, text=PlainTextObject(text=label[:75]))
        for value, label in labels.items()
    ]


def agent_modal(agent: AgentRecord | None, *, name: str = "", channel: str = "") -> View:
    """The add modal (agent None, `name` prefilled) or the edit modal of a stored agent."""
    mode: Mode = "add" if agent is None else "edit"
    tools = list(agent.tools) if agent else ["ask_user", "read_thread"]
    chosen = [o for o in _options(TOOL_OPTIONS) if o.value in tools]
    domains = [t.removeprefix(HTTP_FETCH_PREFIX) for t in tools if t.startswith(HTTP_FETCH_PREFIX)]
    servers = [
        f"{s.get('url', '')} {', '.join(s.get('tools', []))}".strip()
        for s in (agent.mcp_servers if agent else [])
    ]
    identity = agent.identity if agent else "persona"
    has_token = bool(agent and agent.bot_token_encrypted)
    blocks: list[Block] = []
    if agent is None:
        blocks.append(
            _text_input(
                "name",
                "Name (how the commander and people address it)",
                name,
                hint="Lowercase letters, digits, - or _; e.g. researcher",
                max_length=40,
            )
        )
    else:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"Agent *{agent.name}*")))
    blocks += [
        _text_input(
            "display_name",
            "Display name",
            agent.display_name if agent else "",
            optional=True,
            max_length=80,
        ),
        _text_input(
            "icon",
            "Icon",
            agent.icon if agent else "",
            optional=True,
            hint="An emoji code like :mag: or an image URL",
            max_length=500,
        ),
        _text_input(
            "description",
            "What it does (the commander plans with this)",
            agent.description if agent else "",
            multiline=True,
        ),
        _text_input(
            "system_prompt",
            "Instructions (system prompt)",
            agent.system_prompt if agent else "",
            multiline=True,
        ),
        _text_input(
            "model",
            "Model",
            (agent.model or "") if agent else "",
            optional=True,
            hint="Empty = the workspace default. E.g. offline, openai:gpt-4o, "
            "anthropic:claude-sonnet-4-5, openai-chat:llama3.1@http://127.0.0.1:11434/v1",
            max_length=200,
        ),
        InputBlock(
            block_id="tools",
            label=PlainTextObject(text="Tools"),
            optional=True,
            element=CheckboxesElement(
                action_id="value", options=_options(TOOL_OPTIONS), initial_options=chosen or None
            ),
        ),
        _text_input(
            "http_domains",
            "Web fetch: allowed domains",
            ", ".join(domains),
            optional=True,
            hint="Comma-separated, e.g. example.com, docs.python.org",
        ),
        _text_input(
            "mcp_servers",
            "MCP servers",
            "\n".join(servers),
            optional=True,
            multiline=True,
            hint="One a line: the server URL, then the tools the agent "
            "may call (or *). E.g. http://127.0.0.1:8000/mcp search, fetch",
        ),
        InputBlock(
            block_id="identity",
            label=PlainTextObject(text="Identity"),
            element=RadioButtonsElement(
                action_id="value",
                options=_options(IDENTITY_OPTIONS),
                initial_option=next(o for o in _options(IDENTITY_OPTIONS) if o.value == identity),
            ),
        ),
        _text_input(
            "bot_token",
            "Bot token of the agent's own app",
            optional=True,
            max_length=200,
            hint=(
                "A token is set – leave empty to keep it."
                if has_token
                else "Only for an own Slack app (`flotilla manifest --agent NAME` makes its "
                "manifest): xoxb-… (stored encrypted, never shown again)"
            ),
        ),
    ]
    metadata = {"mode": mode, "name": agent.name if agent else "", "channel": channel}
    return View(
        type="modal",
        callback_id=AGENT_CALLBACK,
        title=PlainTextObject(text="Add an agent" if agent is None else "Edit an agent"),
        submit=PlainTextObject(text="Save"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=json.dumps(metadata),
        blocks=blocks,
    )


def _state_value(values: Mapping[str, Any], block_id: str) -> Any:
    entry = values.get(block_id, {}).get("value") or {}
    kind = entry.get("type")
    if kind == "checkboxes":
        return tuple(str(o.get("value")) for o in entry.get("selected_options") or [])
    if kind == "radio_buttons":
        return str((entry.get("selected_option") or {}).get("value") or "")
    return str(entry.get("value") or "")


def submitted_draft(view: Mapping[str, Any]) -> tuple[Mode, AgentDraft, str]:
    """The mode, the typed agent and the channel the command came from, from a submission."""
    metadata = json.loads(view.get("private_metadata") or "{}")
    values = (view.get("state") or {}).get("values") or {}
    mode: Mode = "edit" if metadata.get("mode") == "edit" else "add"
    name = metadata.get("name") if mode == "edit" else _state_value(values, "name")
    draft = AgentDraft(
        name=str(name or "").strip().lower(),
        display_name=_state_value(values, "display_name").strip(),
        icon=_state_value(values, "icon").strip(),
        description=_state_value(values, "description"),
        system_prompt=_state_value(values, "system_prompt"),
        model=_state_value(values, "model").strip(),
        tools=_state_value(values, "tools") or (),
        http_domains=_state_value(values, "http_domains"),
        mcp_servers=_state_value(values, "mcp_servers"),
        identity=_state_value(values, "identity") or "persona",
        bot_token=_state_value(values, "bot_token").strip(),
    )
    return mode, draft, str(metadata.get("channel") or "")


# --- texts for /flotilla ------------------------------------------------------------------


def agents_text(agents: Sequence[AgentRecord]) -> str:
    if not agents:
        return "No agents are configured. An admin can add one: `/flotilla agent add NAME`."
    lines = []
    for agent in agents:
        state = "" if agent.enabled else " _(disabled)_"
        kind = "own Slack app" if agent.identity == "app" else "persona"
        model = f", model {agent.model}" if agent.model else ""
        about = escape(agent.description or agent.display_name)
        model = escape(model)
        icon = f"{escape(agent.icon)} " if agent.icon else ""
        lines.append(f"• {icon}*{agent.name}*{state} – {about} ({kind}{model})")
    return _fit("*Agents*\n" + "\n".join(lines))


def thread_link(base_url: str, channel: str, ts: str) -> str:
    """A link to a thread's first message (Slack's permalink format)."""
    if not base_url:
        return f"<#{channel}> thread {ts}"
    return (
        f"<{base_url.rstrip('/')}/archives/{channel}/p{ts.replace('.', '')}|thread> in <#{channel}>"
    )


def plans_text(
    plans: Sequence[tuple[int, str, str, str]],
    base_url: str = "",
    waits: Mapping[int, Sequence[str]] | None = None,
) -> str:
    """Active plans, each with why its steps wait for a run slot (`waits`), if they do."""
    if not plans:
        return "No plans are running."
    waits = waits or {}
    lines = [
        f"• plan {pid} – {status} – {thread_link(base_url, channel, ts)}"
        + "".join(f"\n      {_escape_text(w)}" for w in waits.get(pid, ()))
        for pid, status, channel, ts in plans
    ]
    return _fit("*Active plans*\n" + "\n".join(lines))


def _totals(rows: Sequence[UsageTotal], label: str) -> str:
    if not rows:
        return f"*{label}*: nothing yet"
    lines = [
        f"• {r.key} – {r.input_tokens + r.output_tokens:,} tokens "
        f"({r.input_tokens:,} in, {r.output_tokens:,} out)"
        for r in rows
    ]
    return f"*{label}*\n" + "\n".join(lines)


def usage_text(
    since: datetime,
    by_agent: Sequence[UsageTotal],
    by_channel: Sequence[UsageTotal],
    feedback: Sequence[FeedbackTotal] = (),
) -> str:
    channels = [
        UsageTotal(
            f"<#{r.key}>" if r.key not in ("", "None") else "no channel",
            r.input_tokens,
            r.output_tokens,
        )
        for r in by_channel
    ]
    head = f"*Usage since {since:%Y-%m-%d}*"
    parts = [head, _totals(by_agent, "Per agent"), _totals(channels, "Per channel")]
    return _fit("\n".join([*parts, feedback_text(feedback)]))


def audit_text(records: Sequence[AuditRecord]) -> str:
    if not records:
        return "*Audit trail*: no changes yet."
    lines = [
        f"• {r.created_at:%Y-%m-%d %H:%M} UTC – <@{r.actor}> {r.action} {r.target}"
        + (f" ({_details(r.details)})" if r.details else "")
        for r in records
    ]
    return _fit("*Audit trail* (newest first)\n" + "\n".join(lines))


def _details(details: Mapping[str, Any]) -> str:
    parts = []
    for key, value in details.items():
        shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        parts.append(f"{key}: {escape(shown)}")
    return "; ".join(parts)


def escape(text: str) -> str:
    """Typed text shown as mrkdwn: &, < and > escaped, so it cannot mention or link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_text(text: str) -> str:
    """Slack's mrkdwn escaping: &, < and > only."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _fit(text: str) -> str:
    """Within a section's 3,000 characters (long lists are cut with a note)."""
    if len(text) <= SECTION_MAX:
        return text
    return text[: SECTION_MAX - 30].rsplit("\n", 1)[0] + "\n… (more not shown)"


# --- App Home -----------------------------------------------------------------------------


def home_view(reports: Reports, base_url: str = "") -> View:
    """The App Home tab: agents, active plans with links, this month's usage (and audit)."""
    blocks: list[Block] = [
        HeaderBlock(text=PlainTextObject(text="Flotilla")),
        ContextBlock(
            elements=[MarkdownTextObject(text="Mention @Flotilla in a channel to start.")]
        ),
        SectionBlock(text=MarkdownTextObject(text=agents_text(reports.agents))),
    ]
    if reports.for_admin:
        button = ButtonElement(text="Add an agent", action_id=ADD_AGENT_ACTION, style="primary")
        blocks.append(ActionsBlock(elements=[button]))
    blocks += [
        DividerBlock(),
        SectionBlock(text=MarkdownTextObject(text=plans_text(reports.plans, base_url))),
        DividerBlock(),
        SectionBlock(
            text=MarkdownTextObject(
                text=usage_text(
                    reports.since,
                    reports.usage_by_agent,
                    reports.usage_by_channel,
                    reports.feedback,
                )
            )
        ),
    ]
    if reports.scheduler is not None:
        blocks += [
            DividerBlock(),
            SectionBlock(text=MarkdownTextObject(text=_fit(reports.scheduler))),
        ]
    if reports.audit is not None:
        blocks += [
            DividerBlock(),
            SectionBlock(text=MarkdownTextObject(text=audit_text(reports.audit))),
        ]
    return View(type="home", blocks=blocks)
