"""SQLAlchemy models of the services around the plans: the inbox, the scheduler's run
requests, the usage ledger, the audit log, files, Slack fallbacks and feedback.

They share `Base.metadata` with the core tables of `storage/tables.py`; whatever needs the
whole schema (the Alembic environment) imports both modules.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from flotilla.storage.tables import Base, Id, Json, Timestamp


class InboxEntry(Base):
    """An interaction, slash command or Home opening Flotilla acts on, stored before Slack
    gets its ack (`key`: Slack's ids, for de-duplication). `processed_at` is set once its
    work is done; a row left unprocessed after its claim ran out is replayed."""

    __tablename__ = "inbox"
    __table_args__ = (Index("ix_inbox_pending", "processed_at", "claimed_until"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(300), unique=True)
    kind: Mapped[str] = mapped_column(String(32))
    body: Mapped[dict[str, Any]] = mapped_column(Json)
    received_at: Mapped[datetime] = mapped_column(Timestamp)
    # the process handling it holds it until then; afterwards a recovery pass may take it
    claimed_until: Mapped[datetime] = mapped_column(Timestamp)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    processed_at: Mapped[datetime | None] = mapped_column(Timestamp)


class RunRequestRow(Base):
    """A run (a step attempt, or a commander turn) asking the scheduler for a slot.

    `waiting` until an admission pass grants it (`granted`: `holder` runs it while
    `lease_until` is renewed by the job's heartbeat, together with its run lease); a run
    paused for urgent work is `preempted` (it waits again, keeping its place); `done`
    rows are kept a little while as the memory of recent shares, then pruned.
    """

    __tablename__ = "run_requests"
    __table_args__ = (Index("ix_run_requests_state_enqueued", "state", "enqueued_at"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    # the run's lease key (run_leases.run_key): one request per run
    run_key: Mapped[str] = mapped_column(String(200), unique=True)
    effect_key: Mapped[str] = mapped_column(String(200))  # the outbox row it starts
    effect_kind: Mapped[str] = mapped_column(String(40))
    effect: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    team_id: Mapped[str] = mapped_column(String(32))
    channel_id: Mapped[str] = mapped_column(String(32))
    agent_name: Mapped[str] = mapped_column(String(40))
    plan_id: Mapped[int | None] = mapped_column(Integer)
    step_index: Mapped[int | None] = mapped_column(Integer)
    attempt: Mapped[int | None] = mapped_column(Integer)
    priority: Mapped[int] = mapped_column(Integer, default=3)  # 1 urgent … 5 batch
    estimate_tokens: Mapped[int] = mapped_column(Integer, default=0)
    tools: Mapped[list[str]] = mapped_column(Json, default=list)
    # waiting | granted | preempted | done
    state: Mapped[str] = mapped_column(String(16), default="waiting")
    wait_reason: Mapped[str | None] = mapped_column(String(200))
    wait_kind: Mapped[str | None] = mapped_column(String(16))
    holder: Mapped[str | None] = mapped_column(String(100))
    lease_until: Mapped[datetime | None] = mapped_column(Timestamp)
    preempt: Mapped[bool] = mapped_column(Boolean, default=False)  # unused (was: asked to pause)
    grants: Mapped[int] = mapped_column(Integer, default=0)  # times granted (resumes)
    enqueued_at: Mapped[datetime] = mapped_column(Timestamp)
    granted_at: Mapped[datetime | None] = mapped_column(Timestamp)
    finished_at: Mapped[datetime | None] = mapped_column(Timestamp)


class UsageEntry(Base):
    """Tokens spent by one model request batch, for budgets and the App Home."""

    __tablename__ = "usage_ledger"
    __table_args__ = (Index("ix_usage_team_created", "team_id", "created_at"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    team_id: Mapped[str] = mapped_column(String(32))
    channel_id: Mapped[str | None] = mapped_column(String(32))
    plan_id: Mapped[int | None] = mapped_column(Integer)
    step_index: Mapped[int | None] = mapped_column(Integer)
    agent_name: Mapped[str] = mapped_column(String(40))
    model: Mapped[str] = mapped_column(String(200))
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(Timestamp)


class AuditEntry(Base):
    """Who changed what, when: every admin action."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_team_created", "team_id", "created_at"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    team_id: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(32))
    action: Mapped[str] = mapped_column(String(60))
    target: Mapped[str] = mapped_column(String(200), default="")
    details: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[datetime] = mapped_column(Timestamp)


class StoredFile(Base):
    """A file of a conversation: one a person attached (received) or an agent wrote
    (produced). `key` makes each one recorded once: a received file by its Slack id, a
    produced one by the tool call that wrote it. Bytes live in `content` or on disk at
    `path` (by setting) until `expires_at`; the record outlives them."""

    __tablename__ = "files"
    __table_args__ = (
        UniqueConstraint("key"),
        Index("ix_files_conversation", "conversation_id", "direction"),
        Index("ix_files_expires", "expires_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(200))
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    direction: Mapped[str] = mapped_column(String(8))  # received | produced
    name: Mapped[str] = mapped_column(String(255))
    mimetype: Mapped[str] = mapped_column(String(255), default="")
    size: Mapped[int | None] = mapped_column(BigInteger)  # declared (received) or exact
    sha256: Mapped[str | None] = mapped_column(String(64))  # once the bytes are kept
    slack_file_id: Mapped[str | None] = mapped_column(String(32))
    url_private: Mapped[str | None] = mapped_column(Text)  # where a received file is fetched
    permalink: Mapped[str | None] = mapped_column(Text)
    message_ts: Mapped[str | None] = mapped_column(String(32))  # the message it came with
    # the step that produced it (or whose form answer carried it)
    plan_id: Mapped[int | None] = mapped_column(Integer)
    step_index: Mapped[int | None] = mapped_column(Integer)
    run_key: Mapped[str | None] = mapped_column(String(200), index=True)
    # pending | ready | refused (received); stored | uploading | shared (produced)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    refusal: Mapped[str | None] = mapped_column(Text)  # why a received file is not used
    upload_url: Mapped[str | None] = mapped_column(Text)  # a produced file's upload, once begun
    content: Mapped[bytes | None] = mapped_column(LargeBinary)
    path: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(Timestamp)
    expires_at: Mapped[datetime | None] = mapped_column(Timestamp)


class SlackFallback(Base):
    """A Slack feature a workspace does not offer (streaming, agent sessions …): after the
    first refusal Flotilla uses the older way there, without asking again."""

    __tablename__ = "slack_fallbacks"

    team_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    feature: Mapped[str] = mapped_column(String(40), primary_key=True)
    error: Mapped[str] = mapped_column(String(80), default="")
    recorded_at: Mapped[datetime] = mapped_column(Timestamp)


class Feedback(Base):
    """A person's 👍 or 👎 on an answer: one per person and message (the latest click)."""

    __tablename__ = "feedback"
    __table_args__ = (
        UniqueConstraint("team_id", "channel_id", "message_ts", "user_id"),
        Index("ix_feedback_team_created", "team_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    team_id: Mapped[str] = mapped_column(String(32))
    channel_id: Mapped[str] = mapped_column(String(32))
    message_ts: Mapped[str] = mapped_column(String(32))
    user_id: Mapped[str] = mapped_column(String(32))
    plan_id: Mapped[int] = mapped_column(Id)
    step_index: Mapped[int] = mapped_column(Integer)  # 0: the plan's final answer
    agent_name: Mapped[str] = mapped_column(String(40))
    verdict: Mapped[str] = mapped_column(String(8))  # "good" | "bad"
    created_at: Mapped[datetime] = mapped_column(Timestamp)
