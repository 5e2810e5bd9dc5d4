"""A terminal trial of the local workspace: type as a person into a channel and watch the
channel as that person sees it (apps' replies, threads, ephemeral messages)."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Callable

from local_slack.driver import Driver
from local_slack.state import Channel, Message, Person
from local_slack.transcript import render_message, render_view

HELP = """Type a message to post it in #{channel} as @{person}.
  @AppName text    mention an installed app (its bot user)
  > text           reply in the thread you last wrote in
  /command text    run a slash command
  :home AppName    open the app's Home tab
  :quit            leave"""


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

    async def handle(self, line: str) -> bool:
        """Act on one typed line; False when the person leaves."""
        line = line.strip()
        if not line:
            return True
        if line == ":quit":
            return False
        if line.startswith(":home "):
            app = next(a for a in self.driver.state.apps.values() if a.name == line[6:].strip())
            self.driver.open_app_home(self.person, app)
        elif line.startswith("/"):
            command, _, text = line.partition(" ")
            await self.driver.slash_command(self.person, self.channel.id, command, text)
        else:
            reply = line.startswith(">")
            text = mentions_to_slack(self.driver, line.lstrip("> ") if reply else line)
            thread = self.thread_ts if reply else None
            msg = self.driver.post(self.person, self.channel.id, text, thread_ts=thread)
            self.thread_ts = thread or msg.ts
        return True

    def show_new(self) -> None:
        """Print messages and ephemerals this person has not seen yet."""
        state = self.driver.state
        for msg in sorted(state.messages[self.channel.id].values(), key=_ts):
            if msg.ts in self._shown or msg.deleted:
                continue
            self._shown.add(msg.ts)
            indent = "    " if msg.thread_ts and msg.thread_ts != msg.ts else ""
            self.out(render_message(state, msg, indent=indent))
        mine = self.driver.ephemerals(self.person)
        for eph in mine[self._shown_ephemerals :]:
            self.out(f"(only visible to you) {eph.text}")
        self._shown_ephemerals = len(mine)
        modal = state.top_modal(self.person.id)
        if modal is not None and modal.id not in self._shown:
            self._shown.add(modal.id)
            self.out(render_view(state, modal))

    async def run(self) -> None:
        self.out(HELP.format(channel=self.channel.name, person=self.person.name))
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        watcher = asyncio.create_task(self._watch())
        try:
            while line := (await reader.readline()).decode():
                if not await self.handle(line):
                    break
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
