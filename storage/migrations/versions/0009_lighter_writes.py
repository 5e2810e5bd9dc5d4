"""Lighter reconcile writes: the outbox's conversation index dropped (the (conversation,
kind, state) index serves its look-ups), and on SQLite `processed_events` as a table
without rowid

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06 00:40:00

Each reconcile inserts outbox rows and one `processed_events` row. `ix_outbox_conversation_id`
repeated the leading column of `ix_outbox_conversation_kind_state`, which serves the same
look-ups (the foreign key's cascade included): one index entry a row and one page a commit
for nothing. On SQLite a table with a text primary key keeps two b-trees – the rows by
rowid and the key's own index – where a table `WITHOUT ROWID` keeps one, ordered by the key;
PostgreSQL keeps its heap and key index as they are.
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_PROCESSED_EVENTS = """
CREATE TABLE processed_events{suffix} (
    "key" VARCHAR(200) NOT NULL,
    processed_at DATETIME NOT NULL,
    CONSTRAINT pk_processed_events PRIMARY KEY ("key")
){options}
"""


def _rebuild_processed_events(*, with_rowid: bool) -> None:
    options = "" if with_rowid else " WITHOUT ROWID"
    op.execute(_PROCESSED_EVENTS.format(suffix="_rebuilt", options=options))
    op.execute(
        'INSERT INTO processed_events_rebuilt ("key", processed_at) '
        'SELECT "key", processed_at FROM processed_events'
    )
    op.execute("DROP TABLE processed_events")
    op.execute("ALTER TABLE processed_events_rebuilt RENAME TO processed_events")


def upgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_conversation_id")
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_processed_events(with_rowid=False)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_processed_events(with_rowid=True)
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.create_index("ix_outbox_conversation_id", ["conversation_id"], unique=False)
