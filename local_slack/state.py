"""In-memory state of the local Slack-compatible workspace: one team, its people, apps,
channels, messages, modals and App Home views.

Every mutation goes through a method here that ends with `changed()`, so the test driver can
await a condition instead of polling.
"""

from __future__ import annotations

import asyncio
import secrets
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from local_slack.files import FileStore

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


class TsClock:
    """Slack-format message timestamps, strictly increasing even within one microsecond."""

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self._last = 0

    def next(self) -> str:
        micros = max(int(self._now() * 1_000_000), self._last + 1)
        self._last = micros
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


class WorkspaceState:
    """The whole workspace. Plain data plus change notification; no I/O."""

    def __init__(self, team_name: str = "Flotilla Local", domain: str = "flotilla-local") -> None:
        self.team_id = new_id("T")
        self.team_name = team_name
        self.domain = domain
        self.people: dict[str, Person] = {}
        self.apps: dict[str, InstalledApp] = {}
        self.channels: dict[str, Channel] = {}
        self.messages: dict[str, dict[str, Message]] = {}  # channel -> ts -> message
        self.ephemerals: list[Ephemeral] = []
        self.views: dict[str, View] = {}
        self.modal_stacks: dict[tuple[str, str], list[str]] = {}  # (user, app) -> view ids
        self.home_views: dict[tuple[str, str], str] = {}  # (user, app) -> view id
        self.triggers: dict[str, Trigger] = {}
        self.thread_statuses: dict[tuple[str, str], ThreadStatus] = {}  # (channel, thread_ts)
        # (channel, thread_ts, app_id) -> the app's agent session in that thread
        self.agent_sessions: dict[tuple[str, str, str], AgentSession] = {}
        self.ts_clock = TsClock()
        self.files = FileStore()
        self._changed = asyncio.Event()
        self.version = 0

    # ----- change notification -------------------------------------------------------------

    def changed(self) -> None:
        """Wake every waiter; called after each mutation."""
        self.version += 1
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> None:
        """Return once `predicate()` holds, re-checking on every state change."""
        async with asyncio.timeout(timeout):
            while not predicate():
                await self._changed.wait()

    # ----- lookups -------------------------------------------------------------------------

    def user_name(self, user_id: str) -> str:
        person = self.people.get(user_id)
        return person.name if person else user_id

    def person_named(self, name: str) -> Person:
        for p in self.people.values():
            if p.name == name.lstrip("@"):
                return p
        raise KeyError(f"no person or bot user named {name!r}")

    def channel_named(self, name_or_id: str) -> Channel:
        if name_or_id in self.channels:
            return self.channels[name_or_id]
        for c in self.channels.values():
            if c.name == name_or_id.lstrip("#"):
                return c
        raise KeyError(f"no channel {name_or_id!r}")

    def app_by_token(self, token: str) -> InstalledApp | None:
        for app in self.apps.values():
            if secrets.compare_digest(app.bot_token, token):
                return app
        return None

    def app_by_app_token(self, token: str) -> InstalledApp | None:
        for app in self.apps.values():
            if app.app_token and secrets.compare_digest(app.app_token, token):
                return app
        return None

    def app_by_bot_user(self, user_id: str) -> InstalledApp | None:
        for app in self.apps.values():
            if app.bot_user_id == user_id:
                return app
        return None

    def message(self, channel: str, ts: str) -> Message | None:
        msg = self.messages.get(channel, {}).get(ts)
        return msg if msg is not None and not (msg.deleted and not msg.replies) else None

    def thread(self, channel: str, thread_ts: str) -> list[Message]:
        """The parent followed by its replies in ts order (deleted replies left out)."""
        parent = self.messages.get(channel, {}).get(thread_ts)
        if parent is None:
            return []
        replies = [self.messages[channel][ts] for ts in parent.replies]
        return [parent] + [r for r in replies if not r.deleted]

    # ----- mutations -----------------------------------------------------------------------

    def add_person(self, name: str, *, admin: bool = False, owner: bool = False) -> Person:
        person = Person(
            id=new_id("U"),
            name=name,
            real_name=name.replace("_", " ").title(),
            is_admin=admin or owner,
            is_owner=owner,
            is_primary_owner=owner and not any(p.is_primary_owner for p in self.people.values()),
        )
        self.people[person.id] = person
        self.changed()
        return person

    def add_app(self, app: InstalledApp) -> None:
        self.apps[app.app_id] = app
        self.people[app.bot_user_id] = Person(
            id=app.bot_user_id,
            name=app.name.lower().replace(" ", "_"),
            real_name=app.name,
            is_bot=True,
            bot_id=app.bot_id,
            app_id=app.app_id,
        )
        self.changed()

    def add_channel(self, name: str, members: list[str], *, private: bool = False) -> Channel:
        creator = members[0] if members else ""
        channel = Channel(
            id=new_id("G" if private else "C"),
            name=name,
            is_private=private,
            created=int(time.time()),
            creator=creator,
            members=list(dict.fromkeys(members)),
        )
        self.channels[channel.id] = channel
        self.messages[channel.id] = {}
        self.changed()
        return channel

    def dm(self, user_id: str, bot_user_id: str) -> tuple[Channel, bool]:
        """The direct-message channel between a person and a bot user; True when it is new."""
        for channel in self.channels.values():
            if channel.is_im and set(channel.members) == {user_id, bot_user_id}:
                return channel, False
        channel = Channel(
            id=new_id("D"),
            name=user_id,
            is_private=True,
            created=int(time.time()),
            creator=bot_user_id,
            members=[user_id, bot_user_id],
            is_im=True,
        )
        self.channels[channel.id] = channel
        self.messages[channel.id] = {}
        self.changed()
        return channel, True

    def join(self, channel_id: str, user_id: str) -> None:
        channel = self.channels[channel_id]
        if user_id not in channel.members:
            channel.members.append(user_id)
            self.changed()

    def add_message(self, msg: Message) -> Message:
        """Store a new message; a reply is linked to its parent's thread."""
        self.messages[msg.channel][msg.ts] = msg
        if msg.thread_ts and msg.thread_ts != msg.ts:
            parent = self.messages[msg.channel].get(msg.thread_ts)
            if parent is not None:
                parent.replies.append(msg.ts)
                parent.thread_ts = parent.ts
                msg.parent_user_id = parent.author
        self.changed()
        return msg

    def issue_trigger(self, user_id: str, app_id: str, now: float) -> str:
        trigger_id = f"{int(now)}.{secrets.randbelow(10**12):012d}.{secrets.token_hex(16)}"
        self.triggers[trigger_id] = Trigger(trigger_id, user_id, app_id, now)
        return trigger_id

    def new_view(self, app: InstalledApp, user_id: str, spec: Json, root: str | None) -> View:
        view_id = new_id("V")
        view = View(
            id=view_id,
            app_id=app.app_id,
            bot_id=app.bot_id,
            team_id=self.team_id,
            user_id=user_id,
            spec=spec,
            hash=new_view_hash(),
            root_view_id=root or view_id,
            state_values=initial_values(spec),
        )
        self.views[view_id] = view
        return view

    def open_modal(self, user_id: str, app_id: str) -> View | None:
        """The view on top of this person's modal stack for this app, if any."""
        stack = self.modal_stacks.get((user_id, app_id), [])
        return self.views[stack[-1]] if stack else None

    def top_modal(self, user_id: str) -> View | None:
        for (uid, _app), stack in self.modal_stacks.items():
            if uid == user_id and stack:
                return self.views[stack[-1]]
        return None


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


def new_view_hash() -> str:
    return f"{int(time.time())}.{secrets.token_hex(4)}"
