"""A terminal trial of the local workspace: type as a person into a channel and watch the
channel as that person sees it (apps' replies, threads, ephemeral messages, modals, App Home).

Lines come from any standard input: a terminal, a pipe, a file or /dev/null. Input that is no
terminal (a script) is paced: each line waits until what the previous one started has come
to rest, and is echoed after "» ". At the end of a script the console keeps showing the
workspace (its browser page still works) until Ctrl-C, or returns with `exit_on_eof`.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import re
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

from flotilla.local_slack.driver import Attachment, Driver
from flotilla.local_slack.records import Channel, InstalledApp, Message, Person, View
from flotilla.local_slack.transcript import render_message, render_text, render_view
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

END_OF_INPUT = (
    "(end of input: the workspace and its browser page keep running; press Ctrl-C to stop)"
)
SCRIPT_ECHO = "» "  # a line read from a script, shown before what it does
SETTLE_TIMEOUT = 60.0  # seconds a scripted line waits at most for the events it caused
REST_TIMEOUT = 600.0  # seconds a scripted line waits at most for the work it started
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


def say(text: str) -> None:
    """Print a line at once, also when stdout is a pipe or a file (a script's log)."""
    print(text, flush=True)


async def read_lines(stream: TextIO | None) -> AsyncIterator[str]:
    """The lines of `stream` as they come, whatever it is: a terminal, a pipe, a file or
    /dev/null (the event loop's pipe reader takes only pipes and sockets). A daemon thread
    reads the file descriptor itself, so a read that blocks holds up neither the event loop
    nor the exit, and takes no lock that the interpreter's shutdown would wait for. No
    stream at all (standard input closed: `sys.stdin` is None) reads as an empty one."""
    if stream is None:
        return
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()

    def put(line: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody reads any more
            loop.call_soon_threadsafe(lines.put_nowait, line)

    def read() -> None:
        try:
            for line in _raw_lines(stream):
                put(line)
        except (OSError, ValueError):  # closed or unreadable: the end of input
            pass
        finally:
            put(None)

    threading.Thread(target=read, name="console-input", daemon=True).start()
    while (line := await lines.get()) is not None:
        yield line


def _raw_lines(stream: TextIO) -> Iterator[str]:
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):  # no file descriptor (a StringIO)
        yield from iter(stream.readline, "")
        return
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    while chunk := os.read(fd, 65536):
        pending += decoder.decode(chunk)
        *complete, pending = pending.split("\n")
        for line in complete:
            yield line + "\n"
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending


def is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError, AttributeError):
        return False


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
        self, driver: Driver, person: Person, channel: Channel, out: Callable[[str], None] = say
    ) -> None:
        self.driver = driver
        self.person = person
        self.channel = channel
        self.out = out
        self.thread_ts: str | None = None
        self._shown: set[str] = set()
        self._streaming: set[str] = set()  # messages shown while they were still streaming
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
            self._show_message(msg)
        for eph in state.ephemerals[self._shown_ephemerals :]:
            if eph.user in self._actors:
                self.out(f"({self._only(eph.user)}) {render_text(state, eph.text)}")
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

    def _show_message(self, msg: Message) -> None:
        """A message once; one that is still streaming (an agent writing its answer) first
        as its author and "(typing…)", then whole once its stream has stopped."""
        if msg.deleted:
            return
        indent = "    " if msg.thread_ts and msg.thread_ts != msg.ts else ""
        if msg.ts not in self._shown:
            self._shown.add(msg.ts)
            if msg.streaming:
                self._streaming.add(msg.ts)
            self.out(render_message(self.driver.state, msg, indent=indent, body=not msg.streaming))
        elif msg.ts in self._streaming and not msg.streaming:
            self._streaming.discard(msg.ts)
            self.out(render_message(self.driver.state, msg, indent=indent))

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

    async def run(self, *, exit_on_eof: bool = False, stdin: TextIO | None = None) -> None:
        """Print the help once, then act on the lines of `stdin` (default: sys.stdin) until
        `:quit`. At the end of a script's input keep showing the workspace until cancelled
        (Ctrl-C), or with `exit_on_eof` return once what the input started has come to rest;
        Ctrl-D at a terminal leaves, as `:quit` does."""
        stdin = sys.stdin if stdin is None else stdin
        scripted = not is_terminal(stdin)  # a pipe, a file, /dev/null: no person typing
        self.out(self.help_text())
        watcher = asyncio.create_task(self._watch())
        try:
            async for line in read_lines(stdin):
                if scripted:
                    await self._rest()
                    if line.strip():
                        self.out(SCRIPT_ECHO + line.strip())
                if not await self.handle(line):
                    return
                self.show_new()
            if not scripted:
                return
            await self._rest()
            if exit_on_eof:
                return
            self.out(END_OF_INPUT)
            await asyncio.Event().wait()  # serve until cancelled
        finally:
            watcher.cancel()

    async def settle(self) -> None:
        """Until what the last line started has come to rest: here, every event delivered
        once (an app's own work after that is its own; `TrialConsole` awaits Flotilla's)."""
        await self.driver.deliveries_settled(SETTLE_TIMEOUT)

    async def _rest(self) -> None:
        try:
            async with asyncio.timeout(REST_TIMEOUT):
                await self.settle()
        except AssertionError as exc:  # not at rest in time: go on rather than stop
            self.out(f"({exc}; going on)")
        except TimeoutError:
            self.out(f"(still busy after {REST_TIMEOUT:g} s; going on)")
        self.show_new()

    async def _watch(self) -> None:
        while True:
            self.show_new()
            with contextlib.suppress(TimeoutError):  # an hour without a change: look again
                await self.driver.state.wait_for(
                    self._changed_since(self.driver.state.version), 3600
                )

    def _changed_since(self, version: int) -> Callable[[], bool]:
        return lambda: self.driver.state.version != version


def _ts(msg: Message) -> float:
    return float(msg.ts)
