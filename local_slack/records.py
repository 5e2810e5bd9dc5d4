"""The records of the local Slack-compatible workspace: people, installed apps, channels,
messages, ephemerals, views, agent sessions, thread statuses and triggers, as plain dataclasses
(`WorkspaceState` in `local_slack.state` holds and mutates them)."""

from __future__ import annotations

import secrets
import string
import time
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

_ID_ALPHABET = string.ascii_uppercase + string.digits


def new_id(prefix: str) -> str:
    """A Slack-looking id: prefix plus 10 upper-case alphanumerics (U…, C…, A…, B…, V…)."""
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(10))


@dataclass
class Person:
    id: str
    name: str
    real_name: str
    is_admin: bool = False
    is_owner: bool = False
    is_primary_owner: bool = False
    is_bot: bool = False
    bot_id: str | None = None
    app_id: str | None = None


@dataclass
class InstalledApp:
    """An app installed in the workspace, with its bot user and credentials."""

    app_id: str
    name: str
    bot_user_id: str
    bot_id: str
    bot_token: str
    signing_secret: str
    verification_token: str
    scopes: frozenset[str]
    bot_events: frozenset[str]
    request_url: str | None
    interactivity_url: str | None
    commands: dict[str, str]  # "/flotilla" -> request URL
    created: int
    socket_mode: bool = False  # deliveries go over the Socket Mode WebSocket, not HTTP
    app_token: str | None = None  # xapp- token for apps.connections.open

    def bot_profile(self, team_id: str) -> Json:
        return {
            "id": self.bot_id,
            "deleted": False,
            "name": self.name,
            "updated": self.created,
            "app_id": self.app_id,
            "icons": {
                "image_36": "https://a.slack-edge.com/80588/img/plugins/app/bot_36.png",
                "image_48": "https://a.slack-edge.com/80588/img/plugins/app/bot_48.png",
                "image_72": "https://a.slack-edge.com/80588/img/plugins/app/service_72.png",
            },
            "team_id": team_id,
        }


@dataclass
class Channel:
    id: str
    name: str
    is_private: bool
    created: int
    creator: str
    members: list[str] = field(default_factory=list)
    is_im: bool = False
    is_archived: bool = False


@dataclass
class Message:
    """A channel message as Slack stores it; `to_json()` gives the API shape."""

    channel: str
    ts: str
    text: str
    user: str | None
    blocks: list[Json] | None = None
    bot_id: str | None = None
    app_id: str | None = None
    username: str | None = None
    icons: Json | None = None
    thread_ts: str | None = None
    parent_user_id: str | None = None
    subtype: str | None = None
    metadata: Json | None = None
    edited: Json | None = None
    deleted: bool = False
    replies: list[str] = field(default_factory=list)  # ts of replies when this is a parent
    client_msg_id: str | None = None
    streaming: bool = False  # between chat.startStream and chat.stopStream
    files: list[str] = field(default_factory=list)  # ids of the files it shares
    # a streamed message's tasks (task_update chunks by id) and plan title (plan_update)
    tasks: dict[str, Json] = field(default_factory=dict)
    plan_title: str | None = None
    task_display_mode: str | None = None
    # what each person typed or picked in its inputs (client side, as in Slack): user id ->
    # {block_id: {action_id: state entry}}; sent in `state.values` with their next click
    typed: dict[str, Json] = field(default_factory=dict)

    @property
    def author(self) -> str:
        """The user id (or bot id for persona posts) this message is attributed to."""
        return self.user or self.bot_id or ""


@dataclass
class Ephemeral:
    channel: str
    user: str
    ts: str
    text: str
    blocks: list[Json] | None
    thread_ts: str | None
    app_id: str | None
    bot_id: str | None


@dataclass
class View:
    """A modal or App Home view; `to_json()` gives the shape Slack returns."""

    id: str
    app_id: str
    bot_id: str
    team_id: str
    user_id: str
    spec: Json
    hash: str
    root_view_id: str
    previous_view_id: str | None = None
    state_values: Json = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    closed: bool = False

    @property
    def type(self) -> str:
        return str(self.spec.get("type", "modal"))

    def to_json(self) -> Json:
        s = self.spec
        return {
            "id": self.id,
            "team_id": self.team_id,
            "type": self.type,
            "blocks": s.get("blocks", []),
            "private_metadata": s.get("private_metadata", ""),
            "callback_id": s.get("callback_id", ""),
            "state": {"values": self.state_values},
            "hash": self.hash,
            "title": s.get("title"),
            "clear_on_close": bool(s.get("clear_on_close", False)),
            "notify_on_close": bool(s.get("notify_on_close", False)),
            "close": s.get("close"),
            "submit": s.get("submit"),
            "previous_view_id": self.previous_view_id,
            "root_view_id": self.root_view_id,
            "app_id": self.app_id,
            "external_id": s.get("external_id", ""),
            "app_installed_team_id": self.team_id,
            "bot_id": self.bot_id,
        }


@dataclass
class AgentSession:
    """An agent session scoped to a thread (agents.sessions.setStatus): its lifecycle status
    (active, processing, suspended, closed) and every status it went through."""

    app_id: str
    status: str
    title: str = ""
    initiator: str | None = None
    username: str | None = None
    history: list[str] = field(default_factory=list)


@dataclass
class ThreadStatus:
    """An app's status line under a thread (assistant.threads.setStatus), e.g. "is thinking…".

    It goes away when the app replies in the thread or after two minutes."""

    app_id: str
    status: str
    loading_messages: list[str]
    set_at: float  # the workspace clock
    since_ts: str  # a reply by the app after this ts clears it
    username: str | None = None


@dataclass
class Trigger:
    id: str
    user_id: str
    app_id: str
    issued_at: float
    used: bool = False


def initial_values(spec: Json) -> Json:
    """What Slack reports in `state.values` for a new view: its inputs' initial values."""
    values: Json = {}
    for block in spec.get("blocks", []):
        element = block.get("element")
        if block.get("type") != "input" or not isinstance(element, dict):
            continue
        for key, name in (
            ("initial_value", "value"),
            ("initial_option", "selected_option"),
            ("initial_options", "selected_options"),
        ):
            if key in element:
                entry = {"type": element.get("type"), name: element[key]}
                values.setdefault(block.get("block_id"), {})[element.get("action_id")] = entry
    return values


def message_state(msg: Message, user: str) -> Json:
    """The `state.values` Slack sends with a click in `msg`: every input block of the message
    as `user` left it (an input nobody touched holds its initial value, else null)."""
    typed = msg.typed.get(user, {})
    initial = initial_values({"blocks": msg.blocks or []})
    values: Json = {}
    for block in msg.blocks or []:
        element = block.get("element")
        if block.get("type") != "input" or not isinstance(element, dict):
            continue
        block_id, action_id = str(block.get("block_id")), str(element.get("action_id"))
        entry = (typed.get(block_id) or {}).get(action_id)
        entry = entry or (initial.get(block_id) or {}).get(action_id)
        values.setdefault(block_id, {})[action_id] = entry or _empty_entry(element)
    return values


def _empty_entry(element: Json) -> Json:
    kind = element.get("type")
    if kind in ("static_select", "external_select", "radio_buttons"):
        return {"type": kind, "selected_option": None}
    if kind in ("multi_static_select", "multi_external_select", "checkboxes"):
        return {"type": kind, "selected_options": []}
    return {"type": kind, "value": None}


def new_view_hash() -> str:
    return f"{int(time.time())}.{secrets.token_hex(4)}"
