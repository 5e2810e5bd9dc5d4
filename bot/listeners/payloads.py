"""Slack payloads parsed into typed models at the edge, and pure predicates over them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from flotilla.agents.reconciling.ports import StepTag

# Message metadata event types Flotilla writes (Slack: metadata.event_type / event_payload).
DISPATCH_EVENT = "flotilla_dispatch"  # `@agent <input>` for a step
RESULT_EVENT = "flotilla_result"  # a step's answer
FORM_EVENT = "flotilla_form"  # a user step's form, or a blocked step's question
NOTICE_EVENT = "flotilla_notice"  # a notice that must appear once (plan stopped, finished)
FLOTILLA_EVENTS = (DISPATCH_EVENT, RESULT_EVENT, FORM_EVENT, NOTICE_EVENT)
MAX_REQUEST_CHARS = 12_000

MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


class StepMeta(BaseModel):
    """What ties a message to its step: which plan, which step, which attempt."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    plan_id: int
    step: int
    attempt: int
    key: str = ""


class SlackFile(BaseModel):
    """A file object attached to a message (the fields Flotilla reads)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    name: str = ""
    title: str = ""
    mimetype: str = ""
    filetype: str = ""
    size: int | None = None
    url_private: str | None = None
    url_private_download: str | None = None
    permalink: str | None = None


class SlackMessage(BaseModel):
    """A `message` or `app_mention` event's fields that Flotilla uses."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    channel: str
    ts: str
    text: str = ""
    thread_ts: str | None = None
    user: str | None = None
    bot_id: str | None = None
    app_id: str | None = None
    subtype: str | None = None
    username: str | None = None
    metadata: dict[str, Any] | None = None
    files: tuple[SlackFile, ...] = ()

    @property
    def root_ts(self) -> str:
        """The ts of the thread this message belongs to (its own ts when top level)."""
        return self.thread_ts or self.ts

    @property
    def in_thread(self) -> bool:
        return self.thread_ts is not None and self.thread_ts != self.ts

    def step_meta(self, event_type: str) -> StepMeta | None:
        """The step metadata of the given type carried by this message, if any."""
        if not self.metadata or self.metadata.get("event_type") != event_type:
            return None
        try:
            return StepMeta.model_validate(self.metadata.get("event_payload") or {})
        except ValidationError:
            return None


# Subtypes that are not new messages from someone (edits, deletions, joins, …).
IGNORED_SUBTYPES = frozenset(
    {
        "message_changed",
        "message_deleted",
        "message_replied",
        "channel_join",
        "channel_leave",
        "channel_topic",
        "channel_purpose",
        "channel_name",
        "ekm_access_denied",
    }
)


def parse_message(event: Mapping[str, Any]) -> SlackMessage | None:
    """A message event as a typed message, or None for events Flotilla does not act on."""
    if event.get("subtype") in IGNORED_SUBTYPES or event.get("hidden"):
        return None
    try:
        return SlackMessage.model_validate(event)
    except ValidationError:
        return None


Author = Literal["commander", "agent", "other_bot", "person"]


def author_kind(
    message: SlackMessage, *, commander_bot_id: str | None, agent_bot_ids: Mapping[str, str]
) -> Author:
    """Who posted: the commander's own app, one of our agents' apps, another bot, or a person."""
    if message.bot_id:
        if message.bot_id == commander_bot_id:
            return "commander"
        if message.bot_id in agent_bot_ids:
            return "agent"
        return "other_bot"
    if message.subtype == "bot_message":
        return "other_bot"
    return "person" if message.user else "other_bot"


def strip_mention(text: str, user_id: str | None) -> str:
    """The request text without the leading mention of the commander."""
    if user_id:
        text = re.sub(rf"<@{re.escape(user_id)}(?:\|[^>]*)?>", "", text, count=1)
    return text.strip()


def mentioned_users(text: str) -> list[str]:
    return MENTION.findall(text)


def step_metadata(event_type: str, tag: StepTag, key: str) -> dict[str, Any]:
    """The metadata a step's message carries: which plan, step and attempt, and its key."""
    payload = {"plan_id": tag.plan_id, "step": tag.step, "attempt": tag.attempt, "key": key}
    return {"event_type": event_type, "event_payload": payload}
