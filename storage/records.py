"""Plain, immutable records that the table modules return (no ORM objects leave storage/)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class AgentRecord:
    id: int
    team_id: str
    name: str
    display_name: str
    icon: str
    description: str
    system_prompt: str
    model: str | None
    tools: list[str]
    mcp_servers: list[dict[str, Any]]
    identity: str
    bot_token_encrypted: bytes | None
    bot_user_id: str | None
    bot_id: str | None
    app_id: str | None
    enabled: bool
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ConversationRecord:
    id: int
    team_id: str
    channel_id: str
    thread_ts: str
    requested_by: str | None
    request_text: str


@dataclass(frozen=True, slots=True)
class MessageRecord:
    channel_id: str
    ts: str
    user_id: str | None
    bot_id: str | None
    author_name: str | None
    text: str
    metadata: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    id: int
    idempotency_key: str
    conversation_id: int | None
    kind: str
    payload: dict[str, Any]
    attempts: int  # claims so far (2+: it may have been performed before a crash)
    failures: int = 0  # failed deliveries so far (re-claims after a crash not counted)
    created_at: datetime | None = None  # when the effect was decided (queue time)


@dataclass(frozen=True, slots=True)
class StoredRow:
    """An outbox row read back by its key (`storage/outbox.py` `stored_row`)."""

    id: int
    payload: dict[str, Any]
    sent: bool  # no longer pending: performed (or given up)
    claimed: bool  # a sender claimed it at least once


@dataclass(frozen=True, slots=True)
class InboxRecord:
    id: int
    key: str
    kind: str
    body: dict[str, Any]
    attempts: int  # claims so far (2+: its first handling was cut short)


@dataclass(frozen=True, slots=True)
class AgentRunRecord:
    run_key: str
    agent_name: str
    model: str
    status: str
    messages: list[Any] = field(default_factory=list)
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class UsageTotal:
    key: str
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class FeedbackTotal:
    """👍 and 👎 on one agent's answers."""

    agent_name: str
    good: int
    bad: int


@dataclass(frozen=True, slots=True)
class AuditRecord:
    actor: str
    action: str
    target: str
    details: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class FileRecord:
    """A file of a conversation: received from a person or produced by an agent."""

    id: int
    key: str
    conversation_id: int
    direction: str  # received | produced
    name: str
    mimetype: str
    size: int | None
    sha256: str | None
    slack_file_id: str | None
    url_private: str | None
    permalink: str | None
    message_ts: str | None
    plan_id: int | None
    step_index: int | None
    run_key: str | None
    state: str
    refusal: str | None
    upload_url: str | None
    has_bytes: bool
    created_at: datetime
    expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class RunRequestRecord:
    """A run asking the scheduler for a slot (see storage/run_requests.py)."""

    run_key: str
    effect_key: str
    effect_kind: str
    effect: dict[str, Any]
    conversation_id: int | None
    team_id: str
    channel_id: str
    agent_name: str
    plan_id: int | None
    step_index: int | None
    attempt: int | None
    priority: int
    estimate_tokens: int
    tools: list[str]
    state: str
    wait_reason: str | None
    wait_kind: str | None
    holder: str | None
    lease_until: datetime | None
    preempt: bool
    grants: int
    enqueued_at: datetime
    granted_at: datetime | None
