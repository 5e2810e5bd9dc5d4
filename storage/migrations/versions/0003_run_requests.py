"""run requests: the scheduler's queue of runs waiting for (or holding) a slot

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 05:20:00

A dispatched step attempt or a commander turn asks for a run slot with a row here; an
admission pass (one at a time across the deployment) grants rows in fair order, writes
why the others wait, and a granted row's lease is renewed with its run lease.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "run_requests",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("run_key", sa.String(200), nullable=False),
        sa.Column("effect_key", sa.String(200), nullable=False),
        sa.Column("effect_kind", sa.String(40), nullable=False),
        sa.Column("effect", sa.JSON(), nullable=False),
        sa.Column(
            "conversation_id",
            Id,
            sa.ForeignKey(
                "conversations.id",
                ondelete="CASCADE",
                name="fk_run_requests_conversation_id_conversations",
            ),
            nullable=True,
        ),
        sa.Column("team_id", sa.String(32), nullable=False),
        sa.Column("channel_id", sa.String(32), nullable=False),
        sa.Column("agent_name", sa.String(40), nullable=False),
        sa.Column("plan_id", sa.Integer(), nullable=True),
        sa.Column("step_index", sa.Integer(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("estimate_tokens", sa.Integer(), nullable=False),
        sa.Column("tools", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("wait_reason", sa.String(200), nullable=True),
        sa.Column("wait_kind", sa.String(16), nullable=True),
        sa.Column("holder", sa.String(100), nullable=True),
        sa.Column("lease_until", Timestamp, nullable=True),
        sa.Column("preempt", sa.Boolean(), nullable=False),
        sa.Column("grants", sa.Integer(), nullable=False),
        sa.Column("enqueued_at", Timestamp, nullable=False),
        sa.Column("granted_at", Timestamp, nullable=True),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_run_requests"),
        sa.UniqueConstraint("run_key", name="uq_run_requests_run_key"),
    )
    op.create_index("ix_run_requests_state_enqueued", "run_requests", ["state", "enqueued_at"])


def downgrade() -> None:
    op.drop_index("ix_run_requests_state_enqueued", table_name="run_requests")
    op.drop_table("run_requests")
