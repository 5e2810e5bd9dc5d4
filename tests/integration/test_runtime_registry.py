"""The sub-agent registry over storage: typed specs, first-start seeds, enabled names."""

from __future__ import annotations

from datetime import UTC, datetime

from flotilla.agents.tools.registry import (
    DEFAULT_AGENTS,
    enabled_agent_names,
    enabled_agents,
    get_agent_spec,
    seed_default_agents,
)
from flotilla.storage.agents import create_agent, remove_agent
from flotilla.storage.db import Database

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


async def test_first_start_seeds_the_defaults_once(db: Database) -> None:
    async with db.write() as conn:
        added = await seed_default_agents(conn, "T1", NOW)
    assert added == ["researcher", "analyst", "writer"]
    async with db.write() as conn:
        await remove_agent(conn, "T1", "analyst")
        assert await seed_default_agents(conn, "T1", NOW) == []  # an admin's removal sticks
        names = [a.name for a in await enabled_agents(conn, "T1")]
        assert await enabled_agent_names(conn, "T1") == names
    assert names == ["researcher", "writer"]
    assert len(DEFAULT_AGENTS) == 3


async def test_specs_are_typed_from_the_stored_row(db: Database) -> None:
    async with db.write() as conn:
        await create_agent(
            conn,
            "T1",
            "scout",
            NOW,
            description="scouts",
            system_prompt="scout well",
            model="openai-chat:llama3@http://127.0.0.1:11434/v1",
            tools=["ask_user", "http_fetch:Example.com", "http_fetch:docs.python.org", "bogus"],
            mcp_servers=[
                {"url": "http://127.0.0.1:9/mcp", "tools": ["list_price"]},
                {"url": "http://127.0.0.1:9/other"},
            ],
        )
        await create_agent(conn, "T1", "sleepy", NOW, enabled=False)
        spec = await get_agent_spec(conn, "T1", "scout")
        enabled = [a.name for a in await enabled_agents(conn, "T1")]
    assert spec is not None
    assert spec.tools == ("ask_user", "http_fetch")
    assert spec.http_domains == ("example.com", "docs.python.org")
    assert spec.mcp_servers[0].allows("list_price") and not spec.mcp_servers[0].allows("other")
    assert spec.mcp_servers[1].allowed_tools == ()
    assert spec.model == "openai-chat:llama3@http://127.0.0.1:11434/v1"
    assert enabled == ["scout"]
