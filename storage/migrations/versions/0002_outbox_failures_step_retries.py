"""outbox failures apart from claims; commander retries per step

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 03:50:00

`outbox.failures` counts failed deliveries only: a row claimed again after a crash
(its lease expired) is not a failure and must not bring it nearer to being given up.
`plan_steps.retries` counts the commander's `retry_step` operations on a step (capped).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
    with op.batch_alter_table("plan_steps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("retries", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("plan_steps", schema=None) as batch_op:
        batch_op.drop_column("retries")
    with op.batch_alter_table("outbox", schema=None) as batch_op:
        batch_op.drop_column("failures")
