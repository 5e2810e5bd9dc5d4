"""Slack features a workspace does not offer, remembered; feedback on answers

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 05:30:00

`slack_fallbacks`: one row per workspace and Slack feature (streamed answers, agent session
status, thread status) that Slack refused there, so Flotilla uses the older way at once.
`feedback`: a person's 👍/👎 on an answer (per plan, step and agent; the latest click counts).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slack_fallbacks",
        sa.Column("team_id", sa.String(length=32), nullable=False),
        sa.Column("feature", sa.String(length=40), nullable=False),
        sa.Column("error", sa.String(length=80), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("team_id", "feature", name=op.f("pk_slack_fallbacks")),
    )
    op.create_table(
        "feedback",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("team_id", sa.String(length=32), nullable=False),
        sa.Column("channel_id", sa.String(length=32), nullable=False),
        sa.Column("message_ts", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.String(length=32), nullable=False),
        sa.Column("plan_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("agent_name", sa.String(length=40), nullable=False),
        sa.Column("verdict", sa.String(length=8), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feedback")),
        sa.UniqueConstraint(
            "team_id", "channel_id", "message_ts", "user_id", name=op.f("uq_feedback_team_id")
        ),
    )
    with op.batch_alter_table("feedback", schema=None) as batch_op:
        batch_op.create_index("ix_feedback_team_created", ["team_id", "created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("feedback", schema=None) as batch_op:
        batch_op.drop_index("ix_feedback_team_created")
    op.drop_table("feedback")
    op.drop_table("slack_fallbacks")
