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
