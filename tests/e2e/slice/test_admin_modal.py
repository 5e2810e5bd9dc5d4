"""The agent modal end to end: opened by `/flotilla agent add|edit`, validated with errors
shown inline, own-app tokens checked with auth.test, stored encrypted, never shown back."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from flotilla.storage.agents import agents_t
from flotilla.storage.audit import audit_t
from flotilla.storage.db import Database
from tests.e2e.slice.conftest import Run
from tests.e2e.slice.test_admin_command import command, user_id

GOOD = {
    "name": "scout",
    "display_name": "Scout",
    "icon": ":telescope:",
    "description": "Finds leads for the sales team.",
    "system_prompt": "You find leads. Be brief.",
    "model": "offline",
    "tools": ["ask_user"],
    "http_domains": "example.com, Docs.Python.org",
    "mcp_servers": "http://127.0.0.1:9/mcp search, fetch",
    "identity": "persona",
}


async def open_modal(run: Run, who: str, text: str) -> dict[str, Any]:
    """Run the command that opens the agent modal; the modal's view as Slack holds it."""
    delivery = await run.driver.slash_command(who, "launch", "/flotilla", text)
    assert delivery.attempts[-1].status == 200
    await run.modal(who)
    return run.driver.open_view(who).spec


def block_ids(spec: dict[str, Any]) -> list[str]:
    return [b["block_id"] for b in spec["blocks"] if b["type"] == "input"]


async def save(run: Run, who: str, values: dict[str, Any], confirmation: str) -> None:
    """Submit the agent modal; it closes and the confirmation arrives (ephemerally)."""
    seen = sum(e.text.startswith(confirmation) for e in run.driver.ephemerals(who))
    outcome = await run.driver.submit(who, values)
    assert outcome.response_action is None and outcome.view is None, outcome.errors  # closed
    await run.driver.wait_for(
        lambda: sum(e.text.startswith(confirmation) for e in run.driver.ephemerals(who)) > seen,
        what=f"the confirmation {confirmation!r}",
    )


async def raw_rows(run: Run, table: Any) -> list[str]:
    """Every row of a table as text, to look for secrets in clear."""
    async with run.service.db.read() as conn:
        rows = (await conn.execute(select(table))).mappings().all()
    return [json.dumps({k: repr(v) for k, v in row.items()}) for row in rows]


async def test_add_an_agent_errors_inline_then_saved(start: Callable[..., Any]) -> None:
    async with start() as run:
        spec = await open_modal(run, "alex", "agent add scout")
        assert spec["callback_id"] == "flotilla_agent_save"
        assert block_ids(spec)[:2] == ["name", "display_name"]
        assert {"model", "tools", "mcp_servers", "identity", "bot_token"} <= set(block_ids(spec))

        bad = GOOD | {
            "name": "Scout Master!",
            "icon": "telescope",
            "model": "gpt-4o",
            "http_domains": "example.com, not a/domain",
            "mcp_servers": "ftp://x search",
        }
        outcome = await run.driver.submit("alex", bad)
        assert outcome.response_action == "errors" and outcome.problems is None
        assert set(outcome.errors) == {"name", "icon", "model", "http_domains", "mcp_servers"}
        assert "lowercase letters" in outcome.errors["name"]
        assert "'gpt-4o' is not valid" in outcome.errors["model"]
        assert "a/domain" in outcome.errors["http_domains"]
        assert outcome.errors["mcp_servers"].startswith("Line 1")
        assert run.driver.open_view("alex").errors == outcome.errors  # the modal stays open

        for name, error in (("writer", "exists already"), ("user", "reserved")):
            outcome = await run.driver.submit("alex", GOOD | {"name": name})
            assert error in outcome.errors["name"]
        outcome = await run.driver.submit("alex", GOOD | {"mcp_servers": "http://h/mcp"})
        assert "list the tools" in outcome.errors["mcp_servers"]
        assert await run.service.agent("scout") is None

        await save(run, "alex", GOOD, "*scout* is added.")
        scout = await run.service.agent("scout")
        assert scout is not None and scout.enabled and scout.identity == "persona"
        assert scout.display_name == "Scout" and scout.icon == ":telescope:"
        assert scout.model == "offline"
        assert scout.tools == ["ask_user", "http_fetch:example.com", "http_fetch:docs.python.org"]
        assert scout.mcp_servers == [
            {"url": "http://127.0.0.1:9/mcp", "tools": ["search", "fetch"]}
        ]
        assert "*scout* – Finds leads" in await command(run, "maya", "agents")
        trail = await command(run, "alex", "audit")
        assert (
            f"<@{user_id(run, 'alex')}> agent.add scout (identity: persona; model: offline)"
            in trail
        )


async def test_edit_shows_the_stored_agent_and_records_what_changed(
    start: Callable[..., Any],
) -> None:
    async with start() as run:
        assert "exists already" in await command(run, "alex", "agent add writer")
        assert "There is no agent named ghost" in await command(run, "alex", "agent edit ghost")
        spec = await open_modal(run, "alex", "agent edit writer")
        assert "name" not in block_ids(spec)  # a name is not changed (steps refer to it)
        prompt = next(b for b in spec["blocks"] if b["block_id"] == "system_prompt")
        assert prompt["element"]["initial_value"].startswith("You are the team's writer.")
        outcome = await run.driver.submit("alex", {"model": "nonsense", "description": "  "})
        assert set(outcome.errors) == {"model", "description"}

        edit = {"model": "offline", "description": "Writes notes.", "tools": ["read_thread"]}
        await save(run, "alex", edit, "*writer* is saved.")
        writer = await run.service.agent("writer")
        assert writer is not None and writer.model == "offline"
        assert writer.description == "Writes notes." and writer.tools == ["read_thread"]
        assert writer.system_prompt.startswith("You are the team's writer.")  # kept as shown
        trail = await command(run, "alex", "audit")
        assert "agent.edit writer (changed: description, model, tools)" in trail


async def test_own_app_token_checked_encrypted_and_never_shown(
    start: Callable[..., Any], empty_db: Database
) -> None:
    async with start(db=empty_db) as run:  # on a SQLite file and on PostgreSQL
        scout_app = run.stack.workspace.install_app("Scout", scopes=["chat:write"], bot_events=[])
        token = scout_app.bot_token
        await open_modal(run, "alex", "agent add scout")
        own = GOOD | {"identity": "app"}
        outcome = await run.driver.submit("alex", own)
        assert "Paste the bot token" in outcome.errors["bot_token"]
        outcome = await run.driver.submit("alex", own | {"bot_token": "xoxb-0-0-forged"})
        assert outcome.errors == {"bot_token": "Slack refused this token (invalid_auth)."}
        outcome = await run.driver.submit("alex", own | {"bot_token": "hello"})
        assert "starts with xoxb-" in outcome.errors["bot_token"]
        commander = run.stack.commander.bot_token
        outcome = await run.driver.submit("alex", own | {"bot_token": commander})
        assert "Flotilla's own token" in outcome.errors["bot_token"]
        researcher = run.stack.agent_apps["researcher"].bot_token
        outcome = await run.driver.submit("alex", own | {"bot_token": researcher})
        assert "researcher uses this Slack app already" in outcome.errors["bot_token"]

        await save(run, "alex", own | {"bot_token": token}, "*scout* is added. Invite its")
        scout = await run.service.agent("scout")
        assert scout is not None and scout.identity == "app"
        assert scout.bot_id == scout_app.bot_id and scout.bot_user_id == scout_app.bot_user_id
        assert scout.bot_token_encrypted is not None
        assert run.service.cipher.decrypt(scout.bot_token_encrypted) == token
        for row in await raw_rows(run, agents_t) + await raw_rows(run, audit_t):
            assert token not in row and token[-24:] not in row  # nor its secret part

        # the edit modal says a token is set, and keeps it when left empty
        spec = await open_modal(run, "alex", "agent edit scout")
        assert token not in json.dumps(spec)
        field = next(b for b in spec["blocks"] if b["block_id"] == "bot_token")
        assert field["hint"]["text"].startswith("A token is set – leave empty to keep it")
        assert "initial_value" not in field["element"]
        await save(run, "alex", {"display_name": "Scout 2"}, "*scout* is saved. Invite its")
        scout = await run.service.agent("scout")
        assert scout is not None and scout.display_name == "Scout 2"
        assert scout.bot_token_encrypted is not None
        assert run.service.cipher.decrypt(scout.bot_token_encrypted) == token
        assert "own Slack app" in await command(run, "alex", "agents")
        assert token not in await command(run, "alex", "audit")
        for text in (e.text for e in run.driver.ephemerals("alex")):
            assert token not in text

        # back to a persona: the token is dropped
        await open_modal(run, "alex", "agent edit scout")
        await save(run, "alex", {"identity": "persona"}, "*scout* is saved.")
        scout = await run.service.agent("scout")
        assert scout is not None and scout.identity == "persona"
        assert scout.bot_token_encrypted is None and scout.bot_id is None

        # a new token through the edit form: audited as changed, never its value
        await open_modal(run, "alex", "agent edit scout")
        await save(run, "alex", {"identity": "app", "bot_token": token}, "*scout* is saved.")
        assert "(changed: identity, bot_token)" in await command(run, "alex", "audit")
        for row in await raw_rows(run, agents_t) + await raw_rows(run, audit_t):
            assert token not in row and token[-24:] not in row


async def test_a_forged_submission_from_a_non_admin_is_refused(start: Callable[..., Any]) -> None:
    async with start() as run:
        await open_modal(run, "alex", "agent add scout")
        view = run.driver.open_view("alex")
        run.driver.fill("alex", GOOD)
        maya = run.driver.person("maya")
        app = run.stack.commander
        outcome = await run.stack.workspace.interactivity.view_submission(maya, app, view)
        assert outcome.response_action == "errors"
        assert "only workspace admins" in outcome.errors["description"]
        assert await run.service.agent("scout") is None
