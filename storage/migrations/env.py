"""Alembic environment: runs on the connection Flotilla hands it (see storage/migrate.py)."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from flotilla.storage import service_tables  # noqa: F401  (its tables join Base.metadata)
from flotilla.storage.tables import Base

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `flotilla db upgrade` (storage.migrate)")
_run(connection)
