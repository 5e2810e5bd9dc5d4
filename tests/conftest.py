"""Shared fixtures: real databases (a SQLite file and PostgreSQL), no mocks.

PostgreSQL tests use `FLOTILLA_TEST_POSTGRES_URL`. Each test gets its own schema there
(via `search_path`), so tests are isolated and may run in several processes at once.
Without the variable the PostgreSQL cases skip with a reason – except in CI (`CI` set),
where a missing server is a failure, never a silent skip.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import models as pydantic_ai_models
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from flotilla.storage.db import Database
from flotilla.storage.migrate import upgrade

# No test may reach a real model provider.
pydantic_ai_models.ALLOW_MODEL_REQUESTS = False

POSTGRES_URL_ENV = "FLOTILLA_TEST_POSTGRES_URL"
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def postgres_url() -> str:
    url = os.environ.get(POSTGRES_URL_ENV)
    if url:
        return url
    if os.environ.get("CI"):
        pytest.fail(f"{POSTGRES_URL_ENV} is not set: CI must run the PostgreSQL tests")
    pytest.skip(f"PostgreSQL tests need {POSTGRES_URL_ENV} (e.g. postgresql+asyncpg://…)")


class PostgresSchema:
    """A throw-away schema in the test PostgreSQL database."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.name = f"t_{uuid.uuid4().hex[:12]}"

    def database(self, **engine_kwargs: Any) -> Database:
        return Database(
            self.base_url,
            connect_args={"server_settings": {"search_path": self.name}},
            **engine_kwargs,
        )

    async def create(self) -> None:
        engine = create_async_engine(self.base_url)
        async with engine.begin() as conn:
            await conn.execute(text(f'CREATE SCHEMA "{self.name}"'))
        await engine.dispose()

    async def drop(self) -> None:
        engine = create_async_engine(self.base_url)
        async with engine.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE'))
        await engine.dispose()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'flotilla.db'}"


@pytest.fixture(params=BACKENDS)
async def empty_db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """A Database with no schema yet, on each backend."""
    if request.param == "sqlite":
        db = Database(f"sqlite+aiosqlite:///{tmp_path / 'flotilla.db'}")
        yield db
        await db.dispose()
        return
    schema = PostgresSchema(postgres_url())
    await schema.create()
    db = schema.database()
    try:
        yield db
    finally:
        await db.dispose()
        await schema.drop()


@pytest.fixture
async def db(empty_db: Database) -> Database:
    """A migrated Database on each backend."""
    await upgrade(empty_db)
    return empty_db


@pytest.fixture
async def sqlite_db(sqlite_url: str) -> AsyncIterator[Database]:
    """A migrated Database on a SQLite file only (SQLite's own paths: the worker thread's
    hand-over, the remembered plan, the driver's write lock)."""
    db = Database(sqlite_url)
    await upgrade(db)
    yield db
    await db.dispose()


@pytest.fixture
def anyio_backend() -> Iterator[str]:
    yield "asyncio"
