"""SQLAlchemy models: the one place that knows each table.

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
    """Event ids (or channel+ts keys) already applied: inserted in the applying transaction."""

    __tablename__ = "processed_events"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    processed_at: Mapped[datetime] = mapped_column(Timestamp)


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


class OutboxEntry(Base):
    """A side effect decided inside a transaction and performed after its commit."""

    __tablename__ = "outbox"
    __table_args__ = (
        Index("ix_outbox_state_available", "state", "available_at"),
        Index("ix_outbox_conversation_kind_state", "conversation_id", "kind", "state"),
    )

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
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
    preempt: Mapped[bool] = mapped_column(Boolean, default=False)  # asked to pause
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
