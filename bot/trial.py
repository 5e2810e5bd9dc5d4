"""Trying Flotilla without Slack: `flotilla dev` (type into a channel) and `flotilla demo`.

Both run the local Slack workspace, the real Bolt app over HTTP and a real database (see
`bot/local.py`), with the offline model unless `FLOTILLA_MODEL` names a provider.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from bot.local import LocalStack, start_local_stack
from bot.service import Options
from bot.views.forms import INLINE_ACTION, OPEN_ACTION
from bot.views.plan_card import CANCEL_ACTION
from local_slack import Driver, Message
from local_slack.console import Console

DEMO_REQUEST = (
    "compare our pricing with the top three competitors and draft a note for the sales team"
)

DEV_HELP = """
Flotilla is running against a local Slack workspace (offline model unless FLOTILLA_MODEL is set).
You are @{person} in #{channel}. Try:
  @Flotilla compare our pricing with the top three competitors and draft a note for the sales team
  @Flotilla research our launch emails and write a short report
  @Flotilla [ask] research our launch emails and write a short report   (an agent asks you)
  > can we also mention the free trial?        reply in the thread you last wrote in
  :answer Pro                                  answer the open form (one field)
  :answer tiers=Pro; notes=annual discount     answer a form with several fields
  :cancel                                      press the plan card's [Cancel plan]
  :thread                                      show the whole thread as it is now
  :as dev text                                 post as someone else (dev, alex)
  :quit                                        stop
"""


def forms_in(driver: Driver, channel: str, thread_ts: str) -> list[Message]:
    """Flotilla's form messages of a thread that still have an input, newest first."""
    found = []
    for message in reversed(driver.state.thread(channel, thread_ts)):
        for block in message.blocks or []:
            if str(block.get("block_id", "")).startswith("form:"):
                found.append(message)
                break
    return found


def parse_answer(text: str) -> dict[str, str]:
    """`tiers=Pro; notes=x` -> {"field:tiers": "Pro", "field:notes": "x"}."""
    values = {}
    for part in text.split(";"):
        name, sep, value = part.partition("=")
        if sep and name.strip():
            values[f"field:{name.strip()}"] = value.strip()
    return values


class TrialConsole(Console):
    """The workspace console plus Flotilla's forms, card and thread view."""

    def __init__(self, stack: LocalStack, out: Callable[[str], None] = print) -> None:
        person = stack.people["maya"]
        super().__init__(Driver(stack.workspace), person, stack.channel, out)
        self.stack = stack
        self._edits: dict[str, str | None] = {}

    async def handle(self, line: str) -> bool:
        command, _, rest = line.strip().partition(" ")
        if command == ":thread":
            self._print_thread()
        elif command == ":cancel":
            await self._cancel()
        elif command == ":answer":
            await self._answer(rest.strip())
        elif command == ":as":
            who, _, text = rest.partition(" ")
            thread = self.thread_ts
            self.driver.post(who, self.channel.id, text, thread_ts=thread)
        else:
            return await super().handle(line)
        return True

    def show_new(self) -> None:
        super().show_new()
        state = self.driver.state
        for message in state.messages[self.channel.id].values():
            edited = (message.edited or {}).get("ts")
            if edited and self._edits.get(message.ts) != edited and "Plan (" in message.text:
                self._edits[message.ts] = edited
                self.out("(plan card updated) " + re.sub(r"\s+", " ", message.text)[:200])

    def _print_thread(self) -> None:
        if self.thread_ts is None:
            self.out("(no thread yet: mention @Flotilla first)")
            return
        self.out(self.driver.transcript(self.channel.id, self.thread_ts))

    async def _cancel(self) -> None:
        card = self._card()
        if card is None:
            self.out("(no plan card in this thread)")
            return
        await self.driver.click(self.person, card, CANCEL_ACTION)

    def _card(self) -> Message | None:
        if self.thread_ts is None:
            return None
        thread = self.driver.state.thread(self.channel.id, self.thread_ts)
        return next((m for m in thread if "Plan (" in m.text), None)

    async def _answer(self, text: str) -> None:
        forms = forms_in(self.driver, self.channel.id, self.thread_ts) if self.thread_ts else []
        if not forms:
            self.out("(no open form in this thread)")
            return
        form = forms[0]
        if "=" in text:
            await self.driver.click(self.person, form, OPEN_ACTION)
            await self.driver.wait_for(
                lambda: self.driver.state.top_modal(self.person.id), what="the form's modal"
            )
            await self.driver.submit(self.person, parse_answer(text))
        else:
            try:
                await self.driver.click(self.person, form, INLINE_ACTION, value=text)
            except (ValueError, LookupError):  # a form with several fields: use the modal
                self.out("(this form has several fields: :answer name=value; name=value)")


async def dev(database_url: str, options: Options) -> None:
    """Run the local stack and a console on stdin until `:quit` or end of input."""
    stack = await start_local_stack(database_url, options=options)
    try:
        console = TrialConsole(stack)
        console.out(
            DEV_HELP.format(person=console.person.name, channel=stack.channel.name)
            + f"\nLocal Slack Web API: {stack.workspace.api_url}"
        )
        await console.run()
    finally:
        await stack.stop()


async def demo(database_url: str, options: Options) -> str:
    """Play the walkthrough's scenario and return the thread as a person sees it."""
    stack = await start_local_stack(database_url, options=options)
    try:
        driver = Driver(stack.workspace, default_timeout=60)
        root = driver.mention("maya", "launch", stack.commander, DEMO_REQUEST)
        form = await driver.thread_has_message("launch", root.ts, containing="needs your input")
        driver.post("dev", "launch", "can we also mention the free trial?", thread_ts=root.ts)
        await driver.thread_has_message("launch", root.ts, from_="Flotilla", containing="Noted")
        await driver.click("maya", form, OPEN_ACTION)
        await driver.wait_for(
            lambda: driver.state.top_modal(driver.person("maya").id), what="the form"
        )
        await driver.submit("maya", {"field:tiers": "Pro", "field:notes": "the annual discount"})
        await driver.thread_has_message(
            "launch", root.ts, from_="Flotilla", containing="commander: Review"
        )
        await stack.service.settle()
        return driver.transcript("launch", root.ts)
    finally:
        await stack.stop()
