"""SQL helpers the table modules share."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Insert, Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection


class DuplicateError(ValueError):
    """A row with the same unique key exists already."""


class ConcurrentPlanChange(RuntimeError):
    """The stored plan changed between read and write: the transaction must roll back."""


def insert_ignoring_conflict(
    conn: AsyncConnection | Connection, table: Table, **values: Any
) -> Insert:
    """`INSERT … ON CONFLICT DO NOTHING` in the connection's dialect."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table).values(**values).on_conflict_do_nothing()
    return sqlite.insert(table).values(**values).on_conflict_do_nothing()
