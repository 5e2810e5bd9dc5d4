"""Schema migrations (Alembic), run on Flotilla's own engine from async code."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from flotilla.storage.db import Database

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


async def upgrade(db: Database, revision: str = "head") -> None:
    """Bring the schema up to `revision` (the app does this on start)."""
    async with db.engine.begin() as conn:
        await conn.run_sync(lambda sync: command.upgrade(alembic_config(sync), revision))


async def downgrade(db: Database, revision: str = "base") -> None:
    """Take the schema down to `revision` (`base` drops every Flotilla table)."""
    async with db.engine.begin() as conn:
        await conn.run_sync(lambda sync: command.downgrade(alembic_config(sync), revision))


async def current_revision(db: Database) -> str | None:
    """The revision the database is at, None when it has no Flotilla schema."""
    async with db.engine.connect() as conn:
        return await conn.run_sync(
            lambda sync: MigrationContext.configure(sync).get_current_revision()
        )


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()
