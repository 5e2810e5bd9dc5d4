"""conversations.lock_version: optimistic concurrency for the reconcile on PostgreSQL;
an index for the outbox rows of one conversation by kind and state

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02 01:40:00

Every change of a conversation's plan bumps `conversations.lock_version`: the locked path
(`storage/locks.py`) bumps it when it takes the row lock, the optimistic reconcile
(`storage/conversations.py`) writes only `WHERE lock_version = :read` and bumps it in the
same statement. `ix_outbox_conversation_kind_state` serves the reconcile's "a card refresh
is waiting" look-up and the pre-claim of a conversation's due rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("lock_version", sa.Integer(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.create_index(
            "ix_outbox_conversation_kind_state",
            ["conversation_id", "kind", "state"],
            unique=False,
        )


def downgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_index("ix_outbox_conversation_kind_state")
    with op.batch_alter_table("conversations", schema=None) as batch_op:
        batch_op.drop_column("lock_version")
