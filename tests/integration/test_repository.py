"""Every repository operation against a real SQLite file and real PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.agents import create_agent, get_agent, list_agents, remove_agent, update_agent
from flotilla.storage.audit import audit, audit_trail
from flotilla.storage.conversations import (
    find_conversation,
    get_conversation,
    open_conversation,
    store_message,
    thread_messages,
)
from flotilla.storage.db import Database
from flotilla.storage.events import forget_processed_events_before, record_event
from flotilla.storage.outbox import (
    claim_effects,
    enqueue_effects,
    give_up_effect,
    mark_effect_done,
    pending_effect_count,
    retry_effect_later,
)
from flotilla.storage.records import MessageRecord
from flotilla.storage.runs import claim_run, load_run, release_run, renew_run, save_run
from flotilla.storage.sql import DuplicateError
from flotilla.storage.tables import Agent
from flotilla.storage.usage import record_usage, usage_since
from flotilla.storage.workspaces import (
    ensure_workspace,
    set_workspace_default_model,
    workspace_default_model,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
TEAM = "T0001"


async def mark_event_processed(conn: AsyncConnection, key: str, now: datetime) -> bool:
    return bool(await conn.run_sync(record_event, key, now))


async def enqueue_effect(
    conn: AsyncConnection,
    *,
    idempotency_key: str,
    kind: str,
    payload: dict[str, Any],
    conversation_id: int | None,
    now: datetime,
) -> bool:
    row = {
        "idempotency_key": idempotency_key,
        "kind": kind,
        "payload": payload,
        "conversation_id": conversation_id,
    }
    return bool(await conn.run_sync(enqueue_effects, [row], now, ignore_duplicates=True))


async def test_workspace_is_created_once(db: Database) -> None:
    async with db.write() as conn:
        assert await ensure_workspace(conn, TEAM, NOW, name="Acme") is True
        assert await ensure_workspace(conn, TEAM, NOW, name="ignored") is False
        await set_workspace_default_model(conn, TEAM, "openai:gpt-4.1")
    async with db.read() as conn:
        assert await workspace_default_model(conn, TEAM) == "openai:gpt-4.1"
        assert await workspace_default_model(conn, "T-none") is None


async def test_event_is_processed_once(db: Database) -> None:
    async with db.write() as conn:
        assert await mark_event_processed(conn, "Ev1", NOW) is True
        assert await mark_event_processed(conn, "Ev1", NOW) is False
        assert await mark_event_processed(conn, "C1:1.000100", NOW) is True
    async with db.write() as conn:
        assert await mark_event_processed(conn, "Ev1", NOW) is False
        removed = await forget_processed_events_before(conn, NOW + timedelta(seconds=1))
    assert removed == 2


async def test_event_key_rolled_back_with_its_transaction(db: Database) -> None:
    """The key is only kept when the work that applied the event commits."""
    with pytest.raises(RuntimeError):
        async with db.write() as conn:
            assert await mark_event_processed(conn, "Ev2", NOW)
            raise RuntimeError("the handler failed")
    async with db.write() as conn:
        assert await mark_event_processed(conn, "Ev2", NOW) is True


async def test_conversation_and_messages(db: Database) -> None:
    async with db.write() as conn:
        first = await open_conversation(
            conn,
            team_id=TEAM,
            channel_id="C1",
            thread_ts="1.000100",
            requested_by="U1",
            request_text="compare pricing",
            now=NOW,
        )
        again = await open_conversation(
            conn,
            team_id=TEAM,
            channel_id="C1",
            thread_ts="1.000100",
            requested_by="U2",
            request_text="other",
            now=NOW,
        )
    assert first == again
    assert first.requested_by == "U1" and first.request_text == "compare pricing"

    messages = [
        MessageRecord("C1", f"1.00010{i}", "U1", None, "Maya", f"text {i}", None) for i in range(3)
    ]
    with_meta = MessageRecord(
        "C1", "1.000200", None, "B1", "researcher", "result", {"event_type": "x"}
    )
    async with db.write() as conn:
        for message in [*messages, with_meta]:
            assert await store_message(conn, first.id, message, NOW)
        assert not await store_message(conn, first.id, messages[0], NOW)
    async with db.read() as conn:
        stored = await thread_messages(conn, first.id)
        newest_two = await thread_messages(conn, first.id, limit=2)
        found = await find_conversation(conn, TEAM, "C1", "1.000100")
        missing = await find_conversation(conn, TEAM, "C1", "9.9")
        by_id = await get_conversation(conn, first.id)
    assert [m.ts for m in stored] == [m.ts for m in [*messages, with_meta]]
    assert stored[-1].metadata == {"event_type": "x"}
    assert [m.ts for m in newest_two] == ["1.000102", "1.000200"]
    assert found == first == by_id
    assert missing is None


async def test_agents_crud(db: Database) -> None:
    async with db.write() as conn:
        created = await create_agent(
            conn,
            TEAM,
            "researcher",
            NOW,
            description="finds facts",
            tools=["http_fetch"],
            bot_token_encrypted=b"\x00cipher",
        )
        with pytest.raises(DuplicateError, match="exists already"):
            await create_agent(conn, TEAM, "researcher", NOW)
        await create_agent(conn, TEAM, "analyst", NOW, enabled=False)
    assert created.display_name == "researcher"
    assert created.tools == ["http_fetch"]
    assert created.bot_token_encrypted == b"\x00cipher"

    later = NOW + timedelta(minutes=5)
    async with db.write() as conn:
        updated = await update_agent(conn, TEAM, "researcher", later, model="openai:gpt-4.1")
        with pytest.raises(LookupError):
            await update_agent(conn, TEAM, "nobody", later, model="x")
        with pytest.raises(TypeError, match="unknown agent fields"):
            await update_agent(conn, TEAM, "researcher", later, status="done")
    assert updated.model == "openai:gpt-4.1"
    assert updated.updated_at == later

    async with db.read() as conn:
        names = [a.name for a in await list_agents(conn, TEAM)]
        enabled = [a.name for a in await list_agents(conn, TEAM, enabled_only=True)]
    assert names == ["analyst", "researcher"]
    assert enabled == ["researcher"]

    async with db.write() as conn:
        assert await remove_agent(conn, TEAM, "analyst") is True
        assert await remove_agent(conn, TEAM, "analyst") is False
        assert await get_agent(conn, TEAM, "analyst") is None
        count = len(list(await conn.execute(select(Agent.__table__))))
    assert count == 1


async def test_outbox_claim_send_and_retry(db: Database) -> None:
    async with db.write() as conn:
        assert await enqueue_effect(
            conn,
            idempotency_key="plan:1:step:1:attempt:1",
            kind="dispatch",
            payload={"text": "@researcher go"},
            conversation_id=None,
            now=NOW,
        )
        assert not await enqueue_effect(
            conn,
            idempotency_key="plan:1:step:1:attempt:1",
            kind="dispatch",
            payload={"text": "duplicate"},
            conversation_id=None,
            now=NOW,
        )
        await enqueue_effect(
            conn, idempotency_key="k2", kind="card", payload={}, conversation_id=None, now=NOW
        )
        assert await pending_effect_count(conn) == 2

    lease = NOW + timedelta(seconds=30)
    async with db.write() as conn:
        claimed = await claim_effects(conn, now=NOW, lease_until=lease)
    assert [e.idempotency_key for e in claimed] == ["plan:1:step:1:attempt:1", "k2"]
    assert claimed[0].payload == {"text": "@researcher go"}
    assert claimed[0].attempts == 1

    async with db.write() as conn:
        # leased rows are not claimed again before the lease ends
        assert await claim_effects(conn, now=NOW, lease_until=lease) == []
        await mark_effect_done(conn, claimed[0].id, NOW)
        await retry_effect_later(conn, claimed[1].id, error="429", available_at=NOW)
    async with db.write() as conn:
        again = await claim_effects(conn, now=NOW, lease_until=lease)
        assert [e.idempotency_key for e in again] == ["k2"]
        assert again[0].attempts == 2
        await give_up_effect(conn, again[0].id, error="channel_not_found")
        assert await pending_effect_count(conn) == 0


async def test_concurrent_claimers_never_share_a_row(db: Database) -> None:
    """Several claimers at once (replicas): each outbox row is claimed by exactly one."""
    async with db.write() as conn:
        for i in range(40):
            await enqueue_effect(
                conn,
                idempotency_key=f"k{i}",
                kind="card",
                payload={},
                conversation_id=None,
                now=NOW,
            )

    async def claimer() -> list[str]:
        got: list[str] = []
        while True:
            async with db.write() as conn:
                batch = await claim_effects(
                    conn, now=NOW, lease_until=NOW + timedelta(hours=1), limit=3
                )
            if not batch:
                return got
            got.extend(e.idempotency_key for e in batch)

    results = await asyncio.gather(*(claimer() for _ in range(5)))
    claimed = [key for keys in results for key in keys]
    assert sorted(claimed) == sorted(f"k{i}" for i in range(40))


async def test_agent_run_history_saved_and_loaded(db: Database) -> None:
    history = [{"kind": "request", "parts": [{"content": "hi"}]}]
    async with db.write() as conn:
        await save_run(
            conn,
            run_key="plan:1:step:2:attempt:1",
            agent_name="writer",
            model="offline",
            status="running",
            messages=history,
            now=NOW,
        )
        await save_run(
            conn,
            run_key="plan:1:step:2:attempt:1",
            agent_name="writer",
            model="offline",
            status="suspended",
            messages=[*history, {"kind": "response"}],
            now=NOW,
            input_tokens=10,
            output_tokens=4,
        )
    async with db.read() as conn:
        run = await load_run(conn, "plan:1:step:2:attempt:1")
        assert await load_run(conn, "nope") is None
    assert run is not None
    assert run.status == "suspended"
    assert len(run.messages) == 2
    assert (run.input_tokens, run.output_tokens) == (10, 4)


async def test_usage_totals(db: Database) -> None:
    async with db.write() as conn:
        for agent, channel, tokens_in in [
            ("writer", "C1", 100),
            ("writer", "C2", 50),
            ("researcher", "C1", 500),
        ]:
            await record_usage(
                conn,
                team_id=TEAM,
                agent_name=agent,
                model="offline",
                input_tokens=tokens_in,
                output_tokens=10,
                now=NOW,
                channel_id=channel,
            )
        await record_usage(
            conn,
            team_id=TEAM,
            agent_name="old",
            model="offline",
            input_tokens=9,
            output_tokens=9,
            now=NOW - timedelta(days=40),
        )
    since = NOW - timedelta(days=30)
    async with db.read() as conn:
        by_agent = await usage_since(conn, TEAM, since)
        by_channel = await usage_since(conn, TEAM, since, by="channel_id")
        with pytest.raises(ValueError):
            await usage_since(conn, TEAM, since, by="text")
    assert [(u.key, u.input_tokens, u.output_tokens) for u in by_agent] == [
        ("researcher", 500, 10),
        ("writer", 150, 20),
    ]
    assert [(u.key, u.input_tokens) for u in by_channel] == [("C1", 600), ("C2", 50)]


async def test_audit_trail(db: Database) -> None:
    async with db.write() as conn:
        await audit(conn, team_id=TEAM, actor="U1", action="agent.add", target="writer", now=NOW)
        await audit(
            conn,
            team_id=TEAM,
            actor="U2",
            action="agent.disable",
            target="writer",
            details={"reason": "noisy"},
            now=NOW,
        )
        await audit(conn, team_id="T-other", actor="U3", action="agent.add", now=NOW)
    async with db.read() as conn:
        trail = await audit_trail(conn, TEAM)
    assert [(a.actor, a.action) for a in trail] == [("U2", "agent.disable"), ("U1", "agent.add")]
    assert trail[0].details == {"reason": "noisy"}


async def test_run_leases(db: Database) -> None:
    later = NOW + timedelta(minutes=2)
    async with db.write() as conn:
        assert await claim_run(conn, "plan:1:step:1:attempt:1", "a", now=NOW, until=later)
        # held by a, not expired: b is refused; a may claim again (a restart of its job)
        assert not await claim_run(conn, "plan:1:step:1:attempt:1", "b", now=NOW, until=later)
        assert await claim_run(conn, "plan:1:step:1:attempt:1", "a", now=NOW, until=later)
        assert await renew_run(conn, "plan:1:step:1:attempt:1", "a", later)
        assert not await renew_run(conn, "plan:1:step:1:attempt:1", "b", later)
    expired = later + timedelta(seconds=1)
    async with db.write() as conn:
        # a's process died: once the lease expired, b takes the run over
        assert await claim_run(
            conn, "plan:1:step:1:attempt:1", "b", now=expired, until=expired + timedelta(1)
        )
        assert not await renew_run(conn, "plan:1:step:1:attempt:1", "a", expired)
        await release_run(conn, "plan:1:step:1:attempt:1", "a")  # not a's: kept
        assert not await claim_run(conn, "plan:1:step:1:attempt:1", "c", now=expired, until=expired)
        await release_run(conn, "plan:1:step:1:attempt:1", "b")
        assert await claim_run(conn, "plan:1:step:1:attempt:1", "c", now=expired, until=later)
