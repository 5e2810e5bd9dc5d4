"""The operator's view in process: /readyz while the database is down and back, the
processed-event pruning, metric label words and the Slack call meter."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import aiohttp
import pytest
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from flotilla.bot.housekeeping import interval_for, prune_processed_events
from flotilla.bot.local import start_local_stack
from flotilla.bot.metrics import Metrics, SlackCallMeter, word
from flotilla.storage.db import Database
from flotilla.storage.events import record_event
from flotilla.storage.outbox import enqueue_effects
from tests.conftest import PostgresSchema, postgres_url


class TcpProxy:
    """A loopback TCP proxy in front of PostgreSQL: `down()` drops every connection and
    refuses new ones, `up()` listens again on the same port."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def up(self) -> None:
        self.server = await asyncio.start_server(self._pipe, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.close()
        await self.server.wait_closed()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers |= {writer, up_writer}

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))


@pytest.fixture
async def proxied_postgres() -> AsyncIterator[tuple[TcpProxy, Database]]:
    base = postgres_url()
    parts = urlsplit(base)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await proxy.up()
    netloc = parts.netloc.rsplit("@", 1)
    user = f"{netloc[0]}@" if len(netloc) == 2 else ""
    schema = PostgresSchema(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}").geturl())
    await schema.create()
    db = schema.database()
    try:
        yield proxy, db
    finally:
        await db.dispose()
        with contextlib.suppress(Exception):
            await proxy.up()
        await schema.drop()


async def get(url: str) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.json()


@pytest.mark.postgres
async def test_readyz_follows_the_database_and_healthz_does_not(
    proxied_postgres: tuple[TcpProxy, Database],
) -> None:
    proxy, db = proxied_postgres
    stack = await start_local_stack(db, own_app_agents=())
    try:
        assert stack.runner is not None
        port = stack.runner.addresses[0][1]
        base = f"http://127.0.0.1:{port}"
        assert (await get(f"{base}/readyz"))[0] == 200

        await proxy.down()
        status, body = await get(f"{base}/readyz")
        assert status == 503 and body["ok"] is False
        assert "database" in str(body["problem"])
        assert (await get(f"{base}/healthz"))[0] == 200  # liveness: the process is fine

        await proxy.up()
        assert (await get(f"{base}/readyz"))[0] == 200
    finally:
        await stack.stop()


async def test_processed_events_are_pruned_after_the_retention(db: Database) -> None:
    now = datetime.now(UTC)
    async with db.write() as conn:
        await conn.run_sync(record_event, "old", now - timedelta(hours=25))
        await conn.run_sync(record_event, "recent", now - timedelta(minutes=5))
    assert await prune_processed_events(db, timedelta(hours=24), now=now) == 1
    async with db.write() as conn:
        assert not await conn.run_sync(record_event, "recent", now)  # still known
        assert await conn.run_sync(record_event, "old", now)  # forgotten: new again
    assert interval_for(timedelta(hours=24)) == 3600
    assert interval_for(timedelta(seconds=8)) == 2


def test_label_values_are_lowercase_words() -> None:
    metrics = Metrics()
    metrics.outcomes.labels("StepSucceeded").inc()
    metrics.outcomes.labels("StepBlocked").inc()
    text = metrics.exposition().decode()
    assert 'flotilla_step_outcomes_total{outcome="succeeded"} 1.0' in text
    assert 'flotilla_step_outcomes_total{outcome="blocked"} 1.0' in text
    assert "StepSucceeded" not in text and "StepBlocked" not in text
    assert word("rate limited") == "rate_limited" and word("ModelTimeout") == "model_timeout"


async def test_the_slack_call_meter_counts_each_attempt_and_never_retries() -> None:
    metrics = Metrics()
    meter = SlackCallMeter(metrics.slack_calls)
    request = HttpRequest(
        method="POST", url="https://slack.com/api/chat.postMessage", headers={}, data=None
    )
    state = RetryState()
    answers = [
        HttpResponse(status_code=429, headers={"retry-after": ["1"]}, body={"ok": False}),
        HttpResponse(status_code=200, headers={}, body={"ok": True}),
        HttpResponse(status_code=200, headers={}, body={"ok": False, "error": "not_in_channel"}),
        HttpResponse(status_code=503, headers={}, body={}),
    ]
    for answer in answers:
        assert not await meter.can_retry_async(state=state, request=request, response=answer)
    assert not await meter.can_retry_async(state=state, request=request, error=OSError("down"))
    text = metrics.exposition().decode()
    for outcome in ("rate_limited", "ok", "error", "server_error", "unreachable"):
        labels = f'method="chat.postMessage",outcome="{outcome}"'
        assert f"flotilla_slack_api_calls_total{{{labels}}} 1.0" in text


async def test_the_outbox_backlog_is_read_at_scrape_time(db: Database) -> None:
    metrics = Metrics()
    now = datetime.now(UTC)
    await metrics.refresh(db, now)
    assert "flotilla_outbox_pending 0.0" in metrics.exposition().decode()
    rows: list[dict[str, object]] = [
        {
            "idempotency_key": f"k{i}",
            "kind": "post",
            "conversation_id": None,
            "payload": {},
            "available_at": now,
        }
        for i in range(3)
    ]
    async with db.write() as conn:
        await conn.run_sync(enqueue_effects, rows[:1], now - timedelta(seconds=90))
        await conn.run_sync(enqueue_effects, rows[1:], now - timedelta(seconds=10))
    await metrics.refresh(db, now)
    text = metrics.exposition().decode()
    assert "flotilla_outbox_pending 3.0" in text
    assert "flotilla_outbox_oldest_pending_seconds 90.0" in text


async def test_housekeeping_deletes_expired_file_bytes(db: Database) -> None:
    from flotilla.bot.housekeeping import forget_expired_files
    from flotilla.storage.conversations import open_conversation
    from flotilla.storage.files import ByteStore, conversation_files, record_produced

    now = datetime.now(UTC)
    async with db.write() as conn:
        conversation = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts="1.000001",
            requested_by="U1",
            request_text="hi",
            now=now,
        )
        await record_produced(
            conn,
            key="k",
            conversation_id=conversation.id,
            run_key="r",
            plan_id=None,
            step_index=None,
            name="note.md",
            mimetype="text/markdown",
            data=b"# hi",
            store=ByteStore(retention=timedelta(days=7)),
            now=now,
        )
    assert await forget_expired_files(db, now=now + timedelta(days=6)) == 0
    assert await forget_expired_files(db, now=now + timedelta(days=7)) == 1
    async with db.read() as conn:
        (file,) = await conversation_files(conn, conversation.id)
    assert (file.name, file.size, file.has_bytes) == ("note.md", 4, False)  # the record stays
