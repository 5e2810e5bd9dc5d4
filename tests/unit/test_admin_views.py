"""Administration's pure parts: the command parser, agent validation, the modal round trip,
and the Block Kit within Slack's limits (checked by the local workspace's validator)."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flotilla.agents.running.models import ProviderKeys
from flotilla.bot.admin_reports import Reports
from flotilla.bot.agent_form import (
    NO_MCP,
    AgentDraft,
    agent_fields,
    draft_problems,
    parse_mcp_servers,
)
from flotilla.bot.listeners.admin import Command, parse_command
from flotilla.bot.views.admin import (
    HELP,
    agent_modal,
    agents_text,
    audit_text,
    home_view,
    plans_text,
    submitted_draft,
    usage_text,
)
from flotilla.local_slack.blocks import check_view
from flotilla.local_slack.records import initial_values
from flotilla.storage.records import AgentRecord, AuditRecord, FeedbackTotal, UsageTotal

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
DRAFT = AgentDraft(name="scout", description="Finds leads.", system_prompt="Find leads.")


def record(name: str = "writer", **changes: object) -> AgentRecord:
    values: dict[str, object] = dict(
        id=1,
        team_id="T1",
        name=name,
        display_name=name.title(),
        icon=":memo:",
        description="Drafts notes.",
        system_prompt="You write.",
        model=None,
        tools=["ask_user", "http_fetch:example.com"],
        mcp_servers=[{"url": "http://h/mcp", "tools": ["search", "fetch"]}],
        identity="persona",
        bot_token_encrypted=None,
        bot_user_id=None,
        bot_id=None,
        app_id=None,
        enabled=True,
        created_at=NOW,
        updated_at=NOW,
    )
    values.update(changes)
    return AgentRecord(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", Command("help")),
        ("  AGENTS ", Command("agents")),
        ("plans", Command("plans")),
        ("usage", Command("usage")),
        ("audit", Command("audit")),
        ("cancel", Command("cancel")),
        ("cancel 12", Command("cancel", plan_id=12)),
        ("agent add", Command("agent", verb="add")),
        ("agent Add Scout", Command("agent", verb="add", name="scout")),
        ("agent disable writer", Command("agent", verb="disable", name="writer")),
    ],
)
def test_commands_are_parsed(text: str, expected: Command) -> None:
    assert parse_command(text) == expected


@pytest.mark.parametrize(
    "text", ["frobnicate", "agent", "agent edit", "agent remove a b", "cancel x", "plans now"]
)
def test_anything_else_is_help_with_a_reason(text: str) -> None:
    parsed = parse_command(text)
    assert parsed.sub == "help" and parsed.problem


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=60))
def test_the_parser_never_fails_and_names_are_well_formed(text: str) -> None:
    parsed = parse_command(text)
    assert parsed.sub in {"help", "agents", "plans", "usage", "audit", "cancel", "agent"}
    if parsed.sub == "agent":
        assert parsed.verb in {"add", "edit", "remove", "enable", "disable"}
        assert parsed.name == parsed.name.lower() and " " not in parsed.name


def test_a_valid_draft_has_no_problems_and_becomes_columns() -> None:
    draft = replace(
        DRAFT,
        tools=("read_thread", "bogus"),
        http_domains="Example.com docs.python.org",
        mcp_servers="http://h/mcp *\n\n  https://k/mcp a,b c  ",
        model="offline",
    )
    assert draft_problems(draft, "add") == {}
    fields = agent_fields(draft)
    assert fields["display_name"] == "scout" and fields["model"] == "offline"
    assert fields["tools"] == [
        "read_thread",
        "http_fetch:example.com",
        "http_fetch:docs.python.org",
    ]
    assert fields["mcp_servers"] == [
        {"url": "http://h/mcp", "tools": ["*"]},
        {"url": "https://k/mcp", "tools": ["a", "b", "c"]},
    ]


@pytest.mark.parametrize(
    ("changes", "block"),
    [
        ({"name": "a"}, "name"),
        ({"name": "9lives"}, "name"),
        ({"name": "commander"}, "name"),
        ({"name": "x" * 41}, "name"),
        ({"icon": "memo"}, "icon"),
        ({"description": "  "}, "description"),
        ({"system_prompt": ""}, "system_prompt"),
        ({"model": "gpt-4o"}, "model"),
        ({"model": "anthropic:x@http://h/v1"}, "model"),
        ({"http_domains": "exa mple.com/x"}, "http_domains"),
        ({"mcp_servers": "h/mcp *"}, "mcp_servers"),
        ({"identity": "robot"}, "identity"),
        ({"bot_token": "xoxp-person"}, "bot_token"),
        ({"display_name": "d" * 81}, "display_name"),
    ],
)
def test_each_problem_is_shown_on_its_block(changes: dict[str, str], block: str) -> None:
    assert set(draft_problems(replace(DRAFT, **changes), "add")) == {block}  # type: ignore[arg-type]


def test_an_edit_does_not_check_the_name() -> None:
    assert draft_problems(replace(DRAFT, name="commander"), "edit") == {}


def test_mcp_lines_say_which_line_is_wrong() -> None:
    servers, problem = parse_mcp_servers("http://a/mcp x\nhttp://b/mcp")
    assert servers == [] and problem is not None and problem.startswith("Line 2")


def test_mcp_servers_where_mcp_support_is_not_installed_say_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    draft = replace(DRAFT, mcp_servers="http://h/mcp search")
    assert draft_problems(draft, "add") == {}
    monkeypatch.setitem(sys.modules, "mcp", None)  # as where `flotilla[mcp]` is not installed
    assert draft_problems(draft, "add") == {"mcp_servers": NO_MCP}
    assert "pip install 'flotilla[mcp]'" in NO_MCP
    assert draft_problems(replace(DRAFT, mcp_servers=""), "add") == {}


def test_the_modals_are_valid_block_kit_and_round_trip() -> None:
    stored = record(bot_token_encrypted=b"secret-blob", identity="app", model="offline")
    for view in (agent_modal(None, name="scout", channel="C1"), agent_modal(stored, channel="C1")):
        spec = view.to_dict()
        assert check_view(spec) == []
        assert "secret-blob" not in str(spec)
    spec = agent_modal(stored, channel="C9").to_dict()
    submitted = {
        "private_metadata": spec["private_metadata"],
        "state": {"values": initial_values(spec)},
    }
    mode, draft, channel = submitted_draft(submitted)
    assert (mode, channel) == ("edit", "C9")
    assert draft.name == "writer" and draft.identity == "app" and draft.bot_token == ""
    assert draft.tools == ("ask_user",) and draft.http_domains == "example.com"
    assert draft.model == "offline" and draft.system_prompt == "You write."
    assert parse_mcp_servers(draft.mcp_servers)[0] == stored.mcp_servers


def test_texts_and_home_fit_slack_limits_with_many_agents() -> None:
    many = [record(f"agent{i:03d}", description="d" * 200) for i in range(60)]
    text = agents_text(many)
    assert len(text) <= 3000 and text.endswith("… (more not shown)")
    plans = [(i, "running", "C1", f"17000000{i:02d}.000100") for i in range(1, 80)]
    assert "https://t.slack.com/archives/C1/p1700000001000100|thread>" in plans_text(
        plans, "https://t.slack.com/"
    )
    usage = [UsageTotal(f"agent{i}", 10, 5) for i in range(3)]
    trail = [AuditRecord("U1", "agent.edit", "writer", {"changed": ["model"]}, NOW)] * 200
    feedback = [FeedbackTotal(f"agent{i}", i, 1) for i in range(3)]
    reports = Reports(many, plans, usage, [UsageTotal("None", 1, 1)], feedback, NOW, trail)
    view = home_view(reports, "https://t.slack.com/").to_dict()
    assert check_view(view) == []
    assert "agent2: 2 👍, 1 👎" in str(view)
    assert "no channel" in usage_text(NOW, [], [UsageTotal("None", 1, 1)])
    assert "<@U1> agent.edit writer (changed: model)" in audit_text(trail[:1])
    assert "`/flotilla agent add NAME`" in HELP


def test_typed_text_cannot_mention_or_link() -> None:
    text = agents_text([record(description="Pings <!channel> & <https://x|y>")])
    assert "&lt;!channel&gt; &amp; &lt;https://x|y&gt;" in text and "<!channel>" not in text


def test_a_provider_model_needs_its_key_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    openai = replace(DRAFT, model="openai:gpt-4o")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    problems = draft_problems(openai, "add")
    assert set(problems) == {"model"} and "OPENAI_API_KEY" in problems["model"]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    assert draft_problems(openai, "add") == {}
    local = replace(DRAFT, model="openai-chat:llama3.1@http://127.0.0.1:11434/v1")
    assert draft_problems(local, "add") == {}
    monkeypatch.delenv("OPENAI_API_KEY")  # a key from the settings (.env) counts too
    keys = ProviderKeys(openai_api_key="sk-from-dotenv-not-real")
    assert draft_problems(openai, "add", keys) == {}
