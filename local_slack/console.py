"""A terminal trial of the local workspace: type as a person into a channel and watch the
channel as that person sees it (apps' replies, threads, ephemeral messages, modals, App Home).
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from flotilla.local_slack.driver import Attachment, Driver
from flotilla.local_slack.records import Channel, InstalledApp, Message, Person, View
from flotilla.local_slack.transcript import render_message, render_view
from flotilla.local_slack.web_assistant import live_statuses

HELP = """You are @{person} in #{channel}. Type a message to post it there.
  @AppName text                   mention an installed app (its bot user)
  > text                          reply in the thread you last wrote in
  /command text                   run a slash command
  :home [AppName]                 open an app's Home tab and show it
  :submit field=value; field=v    fill and submit the open modal (block or action ids)
  :close                          close the open modal
  :attach PATH [text]             post text with the file at PATH attached (> text: in the thread)
  :as NAME <any of the above>     act once as someone else (e.g. :as {other} /command …)
  :quit                           leave"""

ATTACH_MAX_BYTES = 1 << 30  # Slack's upload limit
MULTI_KINDS = (
    "checkboxes",
    "multi_static_select",
    "multi_users_select",
    "multi_conversations_select",
    "multi_channels_select",
)


def mentions_to_slack(driver: Driver, text: str) -> str:
    """`@Name` -> `<@U…>` for people and installed apps' bot users."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        for app in driver.state.apps.values():
            if app.name.lower() == name.lower():
                return f"<@{app.bot_user_id}>"
        for person in driver.state.people.values():
            if person.name.lower() == name.lower():
                return f"<@{person.id}>"
        return match.group(0)

    return re.sub(r"@([A-Za-z0-9_.-]+)", one, text)


def parse_fields(text: str) -> dict[str, str]:
    """`title=Printer; size=Large` -> {"title": "Printer", "size": "Large"}."""
    values = {}
    for part in text.split(";"):
        name, sep, value = part.partition("=")
        if sep and name.strip():
            values[name.strip()] = value.strip()
    return values


class Console:
    """Reads lines from stdin, acts through the driver, prints what the person sees."""

    def __init__(
        self, driver: Driver, person: Person, channel: Channel, out: Callable[[str], None] = print
    ) -> None:
        self.driver = driver
        self.person = person
        self.channel = channel
        self.out = out
        self.thread_ts: str | None = None
        self._shown: set[str] = set()
        self._shown_ephemerals = 0
        self._actors: dict[str, Person] = {person.id: person}  # people whose modals are shown
        self._homes_wanted: dict[tuple[str, str], str | None] = {}  # (user, app) -> old hash

    def help_text(self) -> str:
        others = [
            p.name
            for p in self.driver.state.people.values()
            if not p.is_bot and p.id != self.person.id
        ]
        return HELP.format(
            channel=self.channel.name, person=self.person.name, other=(others or ["NAME"])[0]
        )

    async def handle(self, line: str) -> bool:
        """Act on one typed line; False when the person leaves."""
        line = line.strip()
        if not line:
            return True
        if line == ":quit":
            return False
        command, _, rest = line.partition(" ")
        if command == ":as":
            await self._as(rest.strip())
        elif command == ":home":
            self._open_home(rest.strip())
        elif command == ":submit":
            await self._submit(rest)
        elif command == ":close":
            await self._close()
        elif command == ":attach":
            self.attach(rest.strip())
        elif line.startswith("/"):
            await self._command(line)
        else:
            self.post(line)
        return True

    def post(self, line: str, files: Sequence[Attachment] = ()) -> Message:
        """A message in the channel, or with `>` a reply in the current thread."""
        reply = line.startswith(">")
        text = mentions_to_slack(self.driver, line.lstrip("> ") if reply else line)
        thread = self.thread_ts if reply else None
        msg = self.driver.post(self.person, self.channel.id, text, thread_ts=thread, files=files)
        self.thread_ts = thread or msg.ts
        return msg

    def attach(self, rest: str) -> Message | None:
        """`:attach PATH [text]`: post `text` with the file at PATH attached."""
        path_text, _, line = rest.partition(" ")
        if not path_text:
            self.out("(usage: :attach PATH [text])")
            return None
        path = Path(path_text).expanduser()
        try:
            if path.stat().st_size > ATTACH_MAX_BYTES:
                self.out(f"({path_text} is larger than Slack's 1 GB upload limit)")
                return None
            data = path.read_bytes()
        except OSError as exc:
            self.out(f"(cannot read {path_text}: {exc.strerror or exc})")
            return None
        return self.post(line, files=[(path.name, data, None)])

    async def _command(self, line: str) -> None:
        command, _, text = line.partition(" ")
        try:
            await self.driver.slash_command(self.person, self.channel.id, command, text)
        except LookupError:
            self.out(f"({command} is not a valid command here)")

    async def _as(self, rest: str) -> None:
        name, _, line = rest.partition(" ")
        try:
            other = self.driver.person(name)
        except KeyError:
            self.out(f"(no one called {name!r} here)")
            return
        if other.is_bot or not line.strip():
            self.out("(usage: :as NAME text, /command, :home, :submit …)")
            return
        me, self.person = self.person, other
        self._actors[other.id] = other
        try:
            await self.handle(line)
        finally:
            self.person = me

    def _app_named(self, name: str) -> InstalledApp | None:
        apps = list(self.driver.state.apps.values())
        if not name:
            homes = [a for a in apps if "app_home_opened" in a.bot_events]
            return homes[0] if homes else None
        return next((a for a in apps if a.name.lower() == name.lower().lstrip("@")), None)

    def _open_home(self, name: str) -> None:
        app = self._app_named(name)
        if app is None:
            self.out(f"(no app {name!r} with a Home tab)" if name else "(no app has a Home tab)")
            return
        view = self.driver.home(self.person, app)
        self._homes_wanted[(self.person.id, app.app_id)] = view.hash if view else None
        self.driver.open_app_home(self.person, app)

    async def _submit(self, text: str) -> None:
        try:
            view = self.driver.open_view(self.person)
            await self.driver.submit(self.person, self._values_for(view, parse_fields(text)))
        except LookupError:
            self.out(f"(@{self.person.name} has no modal open)")
        except ValueError as exc:  # a required field left empty, or no such option
            self.out(f"({exc})")

    def _values_for(self, view: View, fields: dict[str, str]) -> dict[str, object]:
        """Split comma-separated answers for elements that hold several values."""
        multi = set()
        for block in view.spec.get("blocks", []):
            element = block.get("element") or {}
            if element.get("type") in MULTI_KINDS:
                multi |= {block.get("block_id"), element.get("action_id")}
        return {
            key: [v.strip() for v in value.split(",") if v.strip()] if key in multi else value
            for key, value in fields.items()
        }

    async def _close(self) -> None:
        try:
            await self.driver.close_modal(self.person)
        except LookupError:
            self.out(f"(@{self.person.name} has no modal open)")

    # ----- showing -------------------------------------------------------------------------

    def show_new(self) -> None:
        """Print messages, ephemerals, modals and requested Home tabs not shown yet."""
        state = self.driver.state
        for msg in sorted(state.messages[self.channel.id].values(), key=_ts):
            if msg.ts in self._shown or msg.deleted:
                continue
            self._shown.add(msg.ts)
            indent = "    " if msg.thread_ts and msg.thread_ts != msg.ts else ""
            self.out(render_message(state, msg, indent=indent))
        for eph in state.ephemerals[self._shown_ephemerals :]:
            if eph.user in self._actors:
                self.out(f"({self._only(eph.user)}) {eph.text}")
        self._shown_ephemerals = len(state.ephemerals)
        for person in self._actors.values():
            modal = state.top_modal(person.id)
            key = f"{modal.id}:{modal.hash}:{sorted(modal.errors.items())}" if modal else ""
            if modal is not None and key not in self._shown:
                self._shown.add(key)
                self.out(f"({self._only(person.id)}: a modal – :submit or :close)")
                self.out(render_view(state, modal))
        self._show_homes()
        self._show_statuses()

    def _show_statuses(self) -> None:
        """Apps' status lines under threads of this channel ("Flotilla is thinking…") and
        their agent sessions' status ("Flotilla: processing")."""
        state = self.driver.state
        for channel_id, _, status in live_statuses(state, self.driver.ws.clock()):
            key = f"status:{status.since_ts}"
            if channel_id == self.channel.id and key not in self._shown:
                self._shown.add(key)
                name = status.username or state.apps[status.app_id].name
                self.out(f"    ({name} {status.status})")
        for (channel_id, _, app_id), session in state.agent_sessions.items():
            key = f"session:{channel_id}:{app_id}:{len(session.history)}"
            if channel_id == self.channel.id and key not in self._shown:
                self._shown.add(key)
                name = session.username or state.apps[app_id].name
                self.out(f"    ({name}: {session.status})")

    def _show_homes(self) -> None:
        state = self.driver.state
        for (user_id, app_id), old_hash in list(self._homes_wanted.items()):
            view_id = state.home_views.get((user_id, app_id))
            view = state.views[view_id] if view_id else None
            if view is not None and view.hash != old_hash:
                del self._homes_wanted[(user_id, app_id)]
                self.out(
                    f"({state.apps[app_id].name} Home, as @{state.user_name(user_id)} sees it)"
                )
                self.out(render_view(state, view))

    def _only(self, user_id: str) -> str:
        if user_id == self.person.id:
            return "only visible to you"
        return f"only visible to @{self.driver.state.user_name(user_id)}"

    async def run(self) -> None:
        """Print the help once, then act on typed lines until `:quit` or end of input."""
        self.out(self.help_text())
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        watcher = asyncio.create_task(self._watch())
        try:
            while line := (await reader.readline()).decode():
                if not await self.handle(line):
                    break
                self.show_new()
        finally:
            watcher.cancel()

    async def _watch(self) -> None:
        while True:
            self.show_new()
            await self.driver.state.wait_for(self._changed_since(self.driver.state.version), 3600)

    def _changed_since(self, version: int) -> Callable[[], bool]:
        return lambda: self.driver.state.version != version


def _ts(msg: Message) -> float:
    return float(msg.ts)
