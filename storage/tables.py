"""SQLAlchemy models: the metadata, the column types, and the core tables – workspaces,
agents, conversations and their threads, plans and steps, the outbox, agent runs and their
leases. The tables of the services around them (the inbox, the scheduler's run requests,
usage, audit, files, Slack fallbacks, feedback) are in `storage/service_tables.py`.

Columns hold plain values (strings, ints, JSON); the domain types live in `agents/`.
Timestamps are UTC `datetime`s written by the caller (no server clock defaults), so the
deciding code stays deterministic and testable.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Deterministic constraint names so Alembic migrations are identical on both backends.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# BIGINT on PostgreSQL, but INTEGER on SQLite so that the primary key is the rowid.
Id = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON()


class UtcDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes on both backends (SQLite keeps no zone: store UTC, read UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("timestamps must be timezone-aware (UTC)")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Timestamp = UtcDateTime()


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Workspace(Base):
    """A Slack team (the tenant). `settings` holds per-workspace overrides."""

    __tablename__ = "workspaces"

    team_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    default_model: Mapped[str | None] = mapped_column(String(200))
    settings: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    created_at: Mapped[datetime] = mapped_column(Timestamp)


class Agent(Base):
    """A sub-agent's configuration and Slack identity."""

    __tablename__ = "agents"
    __table_args__ = (UniqueConstraint("team_id", "name"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("workspaces.team_id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(40))
    display_name: Mapped[str] = mapped_column(String(80))
    icon: Mapped[str] = mapped_column(String(500), default="")
    description: Mapped[str] = mapped_column(Text, default="")
    system_prompt: Mapped[str] = mapped_column(Text, default="")
    model: Mapped[str | None] = mapped_column(String(200))
    tools: Mapped[list[str]] = mapped_column(Json, default=list)
    mcp_servers: Mapped[list[dict[str, Any]]] = mapped_column(Json, default=list)
    # "persona" (the commander's app posts with this name and icon) or "app" (own Slack app)
    identity: Mapped[str] = mapped_column(String(16), default="persona")
    bot_token_encrypted: Mapped[bytes | None] = mapped_column(LargeBinary)
    bot_user_id: Mapped[str | None] = mapped_column(String(32))
    bot_id: Mapped[str | None] = mapped_column(String(32))
    app_id: Mapped[str | None] = mapped_column(String(32))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(Timestamp)
    updated_at: Mapped[datetime] = mapped_column(Timestamp)


class Conversation(Base):
    """A Slack thread the commander owns. Its row is the per-conversation lock on PostgreSQL."""

    __tablename__ = "conversations"
    __table_args__ = (UniqueConstraint("team_id", "channel_id", "thread_ts"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("workspaces.team_id", ondelete="CASCADE"))
    channel_id: Mapped[str] = mapped_column(String(32))
    thread_ts: Mapped[str] = mapped_column(String(32))
    requested_by: Mapped[str | None] = mapped_column(String(32))
    request_text: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(Timestamp)
    # bumped by every change of the conversation's plan (under the lock, or by the
    # optimistic reconcile's version-checked write on PostgreSQL)
    lock_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class Plan(Base):
    """A plan: the DAG of steps the commander wrote for a conversation."""

    __tablename__ = "plans"
    __table_args__ = (Index("ix_plans_conversation_status", "conversation_id", "status"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    # running | paused | completed | aborted | cancelled
    status: Mapped[str] = mapped_column(String(16), default="running")
    max_parallel: Mapped[int] = mapped_column(Integer, default=1)
    # the cap on a step's transient failures (`Plan.max_transient_failures`)
    max_attempts: Mapped[int] = mapped_column(Integer, default=3)
    card_ts: Mapped[str | None] = mapped_column(String(32))
    # the commander's words that opened the plan: the card's intro (one message, not two)
    intro: Mapped[str | None] = mapped_column(Text)
    # bumped on every change, so readers (the plan card) can coalesce updates
    version: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(Timestamp)
    updated_at: Mapped[datetime] = mapped_column(Timestamp)


class PlanStep(Base):
    """One node of a plan: the model's intent plus the orchestrator's execution state."""

    __tablename__ = "plan_steps"
    __table_args__ = (UniqueConstraint("plan_id", "index"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"))
    # written by the model
    index: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(String(200))
    assignee: Mapped[str] = mapped_column(String(40))
    input: Mapped[str] = mapped_column(Text, default="")
    wait_for: Mapped[list[int]] = mapped_column(Json, default=list)
    on_failure: Mapped[str] = mapped_column(String(16), default="ask_commander")
    form: Mapped[dict[str, Any] | None] = mapped_column(Json)
    # written by the orchestrator only
    status: Mapped[str] = mapped_column(String(16), default="pending")
    output_summary: Mapped[str | None] = mapped_column(Text)
    output_files: Mapped[list[str]] = mapped_column(Json, default=list)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # transient failures so far, counted against the plan's cap (plans.max_attempts, the
    # domain's max_transient_failures); a cancelled run is re-dispatched without counting
    transient_failures: Mapped[int] = mapped_column(Integer, default=0)
    # the commander's retry_step operations on this step (capped)
    retries: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    not_before: Mapped[datetime | None] = mapped_column(Timestamp)
    blocked_question: Mapped[dict[str, Any] | None] = mapped_column(Json)
    dispatch_ts: Mapped[str | None] = mapped_column(String(32))
    result_ts: Mapped[str | None] = mapped_column(String(32))
    started_at: Mapped[datetime | None] = mapped_column(Timestamp)
    finished_at: Mapped[datetime | None] = mapped_column(Timestamp)


class ThreadMessage(Base):
    """A message of a conversation's thread, kept from events so no turn re-reads Slack."""

    __tablename__ = "thread_messages"
    __table_args__ = (UniqueConstraint("channel_id", "ts"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    conversation_id: Mapped[int] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    channel_id: Mapped[str] = mapped_column(String(32))
    ts: Mapped[str] = mapped_column(String(32))
    user_id: Mapped[str | None] = mapped_column(String(32))
    bot_id: Mapped[str | None] = mapped_column(String(32))
    author_name: Mapped[str | None] = mapped_column(String(80))
    text: Mapped[str] = mapped_column(Text, default="")
    message_metadata: Mapped[dict[str, Any] | None] = mapped_column("metadata", Json)
    created_at: Mapped[datetime] = mapped_column(Timestamp)


class ProcessedEvent(Base):
    """Event ids (or channel+ts keys) already applied: inserted in the applying transaction.
    On SQLite a table without rowid: one b-tree, ordered by the key (migration 0009)."""

    __tablename__ = "processed_events"
    __table_args__ = {"sqlite_with_rowid": False}

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    processed_at: Mapped[datetime] = mapped_column(Timestamp)


class OutboxEntry(Base):
    """A side effect decided inside a transaction and performed after its commit."""

    __tablename__ = "outbox"
    __table_args__ = (
        Index("ix_outbox_state_available", "state", "available_at"),
        Index("ix_outbox_conversation_kind_state", "conversation_id", "kind", "state"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)
    # looked up through ix_outbox_conversation_kind_state, which it leads (migration 0009)
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    kind: Mapped[str] = mapped_column(String(40))
    payload: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    # pending | sent | failed
    state: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)  # claims (deliveries)
    # failed deliveries only (a re-claim after a crash is not one): the give-up count
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    available_at: Mapped[datetime] = mapped_column(Timestamp)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(Timestamp)
    sent_at: Mapped[datetime | None] = mapped_column(Timestamp)


class AgentRun(Base):
    """One agent run (a step, or a commander turn): its message history and usage."""

    __tablename__ = "agent_runs"
    __table_args__ = (UniqueConstraint("run_key"),)

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    # e.g. "plan:12:step:3:attempt:1" or "commander:<conversation>:<ts>"
    run_key: Mapped[str] = mapped_column(String(200))
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE")
    )
    plan_id: Mapped[int | None] = mapped_column(ForeignKey("plans.id", ondelete="CASCADE"))
    step_index: Mapped[int | None] = mapped_column(Integer)
    agent_name: Mapped[str] = mapped_column(String(40))
    model: Mapped[str] = mapped_column(String(200))
    # running | suspended | finished | failed
    status: Mapped[str] = mapped_column(String(16), default="running")
    messages: Mapped[list[Any]] = mapped_column(Json, default=list)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(Timestamp)
    updated_at: Mapped[datetime] = mapped_column(Timestamp)


class RunLease(Base):
    """Which process runs an agent run now: a lease renewed while it runs, so that after a
    crash another replica takes the run over once the lease expired, and never before."""

    __tablename__ = "run_leases"

    run_key: Mapped[str] = mapped_column(String(200), primary_key=True)
    owner: Mapped[str] = mapped_column(String(100))
    lease_until: Mapped[datetime] = mapped_column(Timestamp)
