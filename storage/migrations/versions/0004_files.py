"""files: attachments people send and files agents produce

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 05:10:00

One row per file of a conversation (received or produced), recorded once by its `key`;
its bytes in `content` or on disk (`path`) until `expires_at`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", Id, autoincrement=True, nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("conversation_id", Id, nullable=False),
        sa.Column("direction", sa.String(length=8), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("mimetype", sa.String(length=255), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("slack_file_id", sa.String(length=32), nullable=True),
        sa.Column("url_private", sa.Text(), nullable=True),
        sa.Column("permalink", sa.Text(), nullable=True),
        sa.Column("message_ts", sa.String(length=32), nullable=True),
        sa.Column("plan_id", sa.Integer(), nullable=True),
        sa.Column("step_index", sa.Integer(), nullable=True),
        sa.Column("run_key", sa.String(length=200), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("refusal", sa.Text(), nullable=True),
        sa.Column("upload_url", sa.Text(), nullable=True),
        sa.Column("content", sa.LargeBinary(), nullable=True),
        sa.Column("path", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_files_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
        sa.UniqueConstraint("key", name=op.f("uq_files_key")),
    )
    op.create_index("ix_files_conversation", "files", ["conversation_id", "direction"])
    op.create_index("ix_files_expires", "files", ["expires_at"])
    op.create_index(op.f("ix_files_run_key"), "files", ["run_key"])


def downgrade() -> None:
    op.drop_index(op.f("ix_files_run_key"), table_name="files")
    op.drop_index("ix_files_expires", table_name="files")
    op.drop_index("ix_files_conversation", table_name="files")
    op.drop_table("files")
