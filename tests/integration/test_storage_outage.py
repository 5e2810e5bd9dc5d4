"""A database outage is what it is: a storage error, retried, never the model's fault and
never paid for twice; /readyz says the database is down while /healthz stays liveness.

These tests stop and start a throw-away PostgreSQL server of their own
(`tests/throwaway_postgres.py`), never the shared one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from slack_sdk.web.async_client import AsyncWebClient
from sqlalchemy import text

from flotilla.agents.core.errors import StorageError
from flotilla.agents.core.failures import PUBLIC_STORAGE, classify_error, is_storage_error
from flotilla.agents.core.retry_policy import DELIVERY
from flotilla.agents.planning.effects import MessageForCommander, to_row
from flotilla.agents.reconciling.outbox import STORAGE_WAIT, Claimed, OutboxSender
from flotilla.agents.running.runtime import StepRunResult, run_step
from flotilla.bot.http import Serving, http_surface
from flotilla.bot.secrets import TokenCipher
from flotilla.bot.service import SlackService
from flotilla.storage import migrate
from flotilla.storage.db import Database
from flotilla.storage.outbox import enqueue_effects
from tests.integration.test_runtime import SPEC, clock, make_job, stored_run
from tests.throwaway_postgres import ThrowawayPostgres

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
async def server() -> AsyncIterator[ThrowawayPostgres]:
    pg = ThrowawayPostgres()
    try:
        await pg.start()
        yield pg
    finally:
        pg.remove()


def final(message: str) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart("final_result", {"message": message, "summary": message})]
    )


async def test_a_run_whose_answer_came_back_during_an_outage_never_pays_again(
    server: ThrowawayPostgres,
) -> None:
    db = Database(server.url)
    await migrate.upgrade(db)
    job = await make_job(db)
    calls = 0

    async def answer_then_outage(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        await server.stop()  # the database goes away while the model answers
        return final("Prices: A 10, B 12.")

    with pytest.raises(StorageError) as raised:
        await run_step(db, job, SPEC, model=FunctionModel(answer_then_outage), now=clock)
    assert raised.value.public == PUBLIC_STORAGE  # not "could not complete in time"
    assert raised.value.retryable
    assert calls == 1

    await server.start()  # back: the run is tried again and re-reports what it had

    def never(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("the model was called again")

    result = await run_step(db, job, SPEC, model=FunctionModel(never), now=clock)
    assert isinstance(result, StepRunResult) and result.message == "Prices: A 10, B 12."
    assert calls == 1
    assert (await stored_run(db, job.run_key)).status == "finished"
    await db.dispose()


async def test_connection_errors_of_a_stopped_server_are_storage_errors(
    server: ThrowawayPostgres,
) -> None:
    db = Database(server.url)
    await migrate.upgrade(db)
    await server.stop()
    with pytest.raises(Exception) as raised:
        await make_job(db)
    assert is_storage_error(raised.value), repr(raised.value)
    assert isinstance(classify_error(raised.value, "openai:gpt-4o"), StorageError)
    await db.dispose()


def test_a_model_connection_error_is_not_a_storage_error() -> None:
    assert not is_storage_error(ConnectionRefusedError("model server"))
    assert not is_storage_error(ValueError("database"))


async def test_locked_sqlite_is_a_storage_error(tmp_path: Path) -> None:
    import sqlite3

    from sqlalchemy.exc import OperationalError

    locked = OperationalError("INSERT", {}, sqlite3.OperationalError("database is locked"))
    assert is_storage_error(locked)
    missing = OperationalError("SELECT", {}, sqlite3.OperationalError("no such table: x"))
    assert not is_storage_error(missing)  # a bug, not an outage: never retried for ever


async def readiness(db: Database) -> tuple[tuple[int, dict[str, object]], tuple[int, object]]:
    """(/readyz status and body, /healthz status and body) of a service on `db`."""
    service = SlackService(
        db,
        AsyncWebClient(token="xoxb-test", base_url="http://127.0.0.1:9/api/"),
        api_url="http://127.0.0.1:9/api/",
        cipher=TokenCipher(TokenCipher.new_key()),
    )
    client = TestClient(TestServer(http_surface(Serving(app=None, service=service))))
    await client.start_server()
    try:
        ready = await client.get("/readyz")
        health = await client.get("/healthz")
        return (ready.status, await ready.json()), (health.status, await health.json())
    finally:
        await client.close()


async def test_readyz_reports_a_stopped_postgresql_and_healthz_stays_up(
    server: ThrowawayPostgres,
) -> None:
    db = Database(server.url)
    await migrate.upgrade(db)
    (status, body), (health, _) = await readiness(db)
    assert (status, health) == (200, 200) and body["ok"] is True
    await server.stop()
    (status, body), (health, _) = await readiness(db)
    assert status == 503 and body["ok"] is False
    assert "database" in str(body["problem"])
    assert health == 200  # liveness only: the process is up
    await server.start()
    (status, _), _ = await readiness(db)
    assert status == 200
    await db.dispose()


async def test_readyz_reports_an_unreadable_sqlite_file(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'flotilla.db'}")
    await migrate.upgrade(db)
    (status, _), _ = await readiness(db)
    assert status == 200
    await db.dispose()
    (tmp_path / "flotilla.db").unlink()
    (tmp_path / "flotilla.db").mkdir()  # the file is gone: a directory where it was
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'flotilla.db'}")
    (status, body), (health, _) = await readiness(db)
    assert status == 503 and "database" in str(body["problem"])
    assert health == 200
    await db.dispose()


async def test_a_delivery_cut_by_an_outage_is_not_counted_as_a_failure(
    server: ThrowawayPostgres,
) -> None:
    db = Database(server.url)
    await migrate.upgrade(db)
    job = await make_job(db)
    assert job.conversation_id is not None
    turn = MessageForCommander(
        key="turn:1", conversation_id=job.conversation_id, text="hi", user="U1", ts="100.2"
    )
    async with db.write() as conn:
        await conn.run_sync(enqueue_effects, [to_row(turn)], NOW)
    performed: list[int] = []

    async def perform(claimed: Claimed) -> bool:
        performed.append(claimed.delivery)
        if len(performed) == 1:  # the database goes away mid-delivery, and comes back
            await server.stop()
            try:
                async with db.read() as conn:
                    await conn.execute(text("SELECT 1"))
            except Exception as exc:
                outage = exc
            await server.start()
            raise outage
        return False

    sender = OutboxSender(db, perform, clock=lambda: NOW, retry=DELIVERY.with_attempts(1))
    assert await sender.deliver_due() == 1
    async with db.read() as conn:
        row = await conn.execute(
            text("SELECT failures, state FROM outbox WHERE idempotency_key = 'turn:1'")
        )
        failures, state = row.one()
    assert (failures, state) == (0, "pending")  # not given up, though one failure would
    later = NOW + STORAGE_WAIT
    assert await OutboxSender(db, perform, clock=lambda: later).deliver_due() == 1
    assert performed == [1, 2]
    await db.dispose()
