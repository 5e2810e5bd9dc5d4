"""Migrations on both backends: up from empty, down to empty, up again; models match."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from flotilla.storage import service_tables  # noqa: F401  (its tables join Base.metadata)
from flotilla.storage.db import Database
from flotilla.storage.migrate import current_revision, downgrade, head_revision, upgrade
from flotilla.storage.tables import Base

EXPECTED_TABLES = {
    "workspaces",
    "agents",
    "conversations",
    "plans",
    "plan_steps",
    "thread_messages",
    "processed_events",
    "outbox",
    "agent_runs",
    "run_leases",
    "run_requests",
    "usage_ledger",
    "audit_log",
    "files",
    "inbox",
    "slack_fallbacks",
    "feedback",
}


async def table_names(db: Database) -> set[str]:
    async with db.engine.connect() as conn:
        names = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
    return names - {"alembic_version"}


async def test_upgrade_downgrade_upgrade(empty_db: Database) -> None:
    assert await current_revision(empty_db) is None
    assert await table_names(empty_db) == set()

    await upgrade(empty_db)
    assert await current_revision(empty_db) == head_revision()
    assert await table_names(empty_db) == EXPECTED_TABLES

    await downgrade(empty_db)
    assert await current_revision(empty_db) is None
    assert await table_names(empty_db) == set()

    await upgrade(empty_db)
    assert await table_names(empty_db) == EXPECTED_TABLES


async def test_upgrade_is_idempotent(db: Database) -> None:
    await upgrade(db)
    assert await current_revision(db) == head_revision()


async def test_migrations_match_the_models(db: Database) -> None:
    """A model change without a migration fails here (autogenerate finds a difference)."""

    def diff(sync: Connection) -> list[object]:
        context = MigrationContext.configure(sync, opts={"compare_type": True})
        return list(compare_metadata(context, Base.metadata))

    async with db.engine.connect() as conn:
        differences = await conn.run_sync(diff)
    assert differences == []
