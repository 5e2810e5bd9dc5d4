"""Slack features a workspace does not offer, remembered

Revision ID: 0005
Revises: 0002
Create Date: 2026-12-01 05:30:00

`slack_fallbacks`: one row per workspace and Slack feature (streamed answers, agent session
status, thread status) that Slack refused there, so Flotilla uses the older way at once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0002"
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


def downgrade() -> None:
    op.drop_table("slack_fallbacks")
