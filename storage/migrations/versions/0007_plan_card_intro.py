"""plans.intro: the commander's words the plan card opens with

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 01:45:00

The commander's reply that announces a plan is no longer a message of its own: the card
carries it (one message instead of two). NULL for plans stored before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.add_column(sa.Column("intro", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("plans", schema=None) as batch_op:
        batch_op.drop_column("intro")
