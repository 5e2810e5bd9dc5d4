"""No per-conversation, per-person or per-token cache grows without bound (counted entries)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr

from flotilla.agents.core.lru import LRUCache
from flotilla.agents.planning.plan import Step
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.agents.running.run_context import CONVERSATION_CACHE_SIZE, Context, ExecutorOptions
from flotilla.bot.identities import Identity, Poster, make_client
from flotilla.bot.manifest import commander_manifest
from flotilla.bot.secrets import TokenCipher
from flotilla.bot.service import Options, SlackService
from flotilla.bot.slack_port import CARD_CACHE_SIZE, SlackPort
from flotilla.local_slack import LocalWorkspace
from flotilla.storage.conversations import open_conversation
from flotilla.storage.db import Database
from flotilla.storage.plans import claim_plan_card
from flotilla.storage.records import ConversationRecord

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_the_lru_cache_forgets_the_least_recently_used_entry() -> None:
    cache: LRUCache[int, str] = LRUCache(3)
    for i in range(3):
        cache.put(i, str(i))
    assert cache.get(0) == "0"  # 0 is now the most recently used
    cache.put(3, "3")
    assert list(cache) == [2, 0, 3] and 1 not in cache and len(cache) == 3
    cache.put(2, "two")  # an update refreshes too
    cache.put(4, "4")
    assert list(cache) == [3, 2, 4] and cache.get(2) == "two"
    assert cache.pop(3) == "3" and cache.pop(3) is None
    with pytest.raises(ValueError):
        LRUCache[int, int](0)


async def conversations(db: Database, n: int) -> list[ConversationRecord]:
    async with db.write() as conn:
        return [
            await open_conversation(
                conn,
                team_id="T1",
                channel_id="C1",
                thread_ts=f"{i}.0",
                requested_by="U1",
                request_text=f"request {i}",
                now=NOW,
            )
            for i in range(n)
        ]


async def test_the_executor_context_keeps_a_bounded_number_of_conversations(
    db: Database,
) -> None:
    convs = await conversations(db, 12)
    parts: dict[str, Any] = dict(
        db=db,
        reconciler=Reconciler(db),
        port=None,
        choose_model=None,
        clock=lambda: NOW,
        options=ExecutorOptions(),
        observer=None,
    )
    default = Context(**parts)  # by default too
    assert default.conversations.max_size == default.threads.max_size == CONVERSATION_CACHE_SIZE
    ctx = Context(**parts, conversations=LRUCache(5), threads=LRUCache(4))
    ctx.team_id = "T1"
    for _round in range(2):
        for conv in convs:
            assert await ctx.conversation(conv.id) == conv
            assert await ctx.find_conversation(conv.channel_id, conv.thread_ts) == conv
            assert len(ctx.conversations) <= 5 and len(ctx.threads) <= 4
    assert list(ctx.conversations) == [c.id for c in convs[-5:]]
    assert [t for _team, _channel, t in ctx.threads] == [c.thread_ts for c in convs[-4:]]
    for i in range(20):  # threads not found are never kept
        assert await ctx.find_conversation("C1", f"missing {i}") is None
    assert len(ctx.threads) == 4


async def test_the_reconciler_keeps_a_bounded_number_of_plans(db: Database) -> None:
    convs = await conversations(db, 8)
    reconciler = Reconciler(db, clock=lambda: NOW, cache_size=3)
    assert Reconciler(db).cache_size == 1000
    for conv in convs:
        await reconciler.start_steps(conv.id, [Step(index=1, title="s", assignee="researcher")])
        assert len(reconciler._cache) <= 3
    assert list(reconciler._cache) == [c.id for c in convs[-3:]]
    await reconciler.reconcile(convs[0].id)  # an old conversation comes back: still bounded
    assert len(reconciler._cache) == 3 and convs[0].id in reconciler._cache


def test_the_poster_keeps_a_bounded_number_of_agent_clients() -> None:
    url = "http://127.0.0.1:1/api/"
    poster = Poster(make_client("xoxb-commander", url), url, client_cache_size=2)
    apps = [
        Identity(name=f"a{i}", display_name="A", kind="app", token=SecretStr(f"xoxb-{i}"))
        for i in range(5)
    ]
    for app in apps:
        assert poster.client_for(app).token == app.token.get_secret_value()  # type: ignore[union-attr]
        assert len(poster._clients) <= 2
    assert poster.client_for(apps[-1]) is poster.client_for(apps[-1])


@pytest.fixture
async def workspace() -> AsyncIterator[LocalWorkspace]:
    ws = LocalWorkspace()
    await ws.start("127.0.0.1", 0)
    yield ws
    await ws.stop()


async def test_the_service_remembers_a_bounded_number_of_admin_checks(
    db: Database, workspace: LocalWorkspace
) -> None:
    app = workspace.install_manifest(commander_manifest(), socket_mode=False)
    people = [workspace.add_person(f"p{i}", admin=i % 2 == 0) for i in range(5)]
    service = SlackService(
        db,
        make_client(app.bot_token, workspace.api_url),
        api_url=workspace.api_url,
        cipher=TokenCipher(TokenCipher.new_key()),
        options=Options(admin_cache_size=2),
    )
    for i, person in enumerate(people):
        assert await service.is_admin(person.id) == (i % 2 == 0)
        assert len(service._admins) <= 2
    assert list(service._admins) == [people[3].id, people[4].id]


async def test_the_port_keeps_a_bounded_number_of_plan_card_messages(db: Database) -> None:
    convs = await conversations(db, 5)
    reconciler = Reconciler(db, clock=lambda: NOW)
    url = "http://127.0.0.1:1/api/"
    client = make_client("xoxb-commander", url)
    port = SlackPort(
        db, client, Poster(client, url), TokenCipher(TokenCipher.new_key()), lambda: NOW
    )
    assert port._cards.max_size == CARD_CACHE_SIZE
    port._cards = LRUCache(2)
    plan_ids = []
    for conv in convs:
        await reconciler.start_steps(conv.id, [Step(index=1, title="s", assignee="researcher")])
        plan = await reconciler.plan(conv.id)
        assert plan is not None
        plan_ids.append(plan.id)
        assert (await port._card(plan.id)).posted is None  # not posted yet: not kept
        async with db.write() as conn:
            await claim_plan_card(conn, plan.id, f"100.{plan.id}")
    for plan_id in plan_ids:
        assert (await port._card(plan_id)).posted == f"100.{plan_id}"
        assert len(port._cards) <= 2
    assert list(port._cards) == plan_ids[-2:]
