"""Shared fixtures: real databases (a SQLite file and PostgreSQL), no mocks; and the hooks
that give the run its PostgreSQL and say at the end what was skipped.

PostgreSQL tests use the server `FLOTILLA_TEST_POSTGRES_URL` names, or else a throw-away
one started from the installed binaries (`tests/shared_postgres.py`). Each pytest process
(each xdist worker) works in a database of its own there, and each test in a schema of its
own (via `search_path`). With neither URL nor binaries the PostgreSQL cases skip with a
reason – except in CI (`CI` set), where a missing server is a failure, never a silent skip.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import models as pydantic_ai_models
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from flotilla.storage.db import Database
from flotilla.storage.migrate import upgrade
from tests import shared_postgres

# No test may reach a real model provider.
pydantic_ai_models.ALLOW_MODEL_REQUESTS = False

POSTGRES_URL_ENV = shared_postgres.POSTGRES_URL_ENV
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def pytest_configure(config: pytest.Config) -> None:
    shared_postgres.configure(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, in the controller: each worker is told where the run's throw-away
    PostgreSQL lives."""
    shared_postgres.configure_worker(node.workerinput)


def pytest_sessionfinish(session: pytest.Session) -> None:
    shared_postgres.finish_process()


def pytest_unconfigure(config: pytest.Config) -> None:
    shared_postgres.unconfigure()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What was skipped and why, one line per reason (the reason says how to run it)."""
    reasons: Counter[str] = Counter()
    for report in terminalreporter.stats.get("skipped", []):
        if isinstance(report.longrepr, tuple):
            reasons[str(report.longrepr[2]).removeprefix("Skipped: ")] += 1
    if not reasons:
        return
    terminalreporter.section("skipped, and how to run them", sep="-", bold=True)
    for reason, count in reasons.most_common():
        terminalreporter.line(f"{count} skipped: {reason}")


def postgres_url() -> str:
    """This process's own database on the test PostgreSQL server (see the module doc)."""
    return shared_postgres.database_url()


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
