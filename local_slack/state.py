"""In-memory state of the local Slack-compatible workspace: one team, its people, apps,
channels, messages, modals and App Home views.

Every mutation goes through a method here that ends with `changed()`, so the test driver can
await a condition instead of polling.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable

from flotilla.local_slack.files import FileStore
from flotilla.local_slack.records import (
    AgentSession,
    Channel,
    Ephemeral,
    InstalledApp,
    Json,
    Message,
    Person,
    ThreadStatus,
    Trigger,
    View,
    initial_values,
    new_id,
    new_view_hash,
)


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
