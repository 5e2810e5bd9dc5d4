"""Trying Flotilla without Slack: `flotilla dev` (the local workspace in the browser and a
console in the terminal) and `flotilla demo` (a scripted scenario).

Both run the local Slack workspace, the real Bolt app over HTTP and a real database (see
`bot/local.py`), with the offline model unless `FLOTILLA_MODEL` names a provider.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import webbrowser
from collections.abc import Callable, Mapping, Sequence

from flotilla.bot.local import LocalStack, start_local_stack
from flotilla.bot.service import Options
from flotilla.bot.views.forms import INLINE_ACTION, OPEN_ACTION, SUBMIT_ACTION
from flotilla.bot.views.plan_card import CANCEL_ACTION
from flotilla.local_slack import Driver, Message
from flotilla.local_slack.console import SETTLE_TIMEOUT, Console, say
from flotilla.local_slack.driver import Attachment
from flotilla.local_slack.transcript import render_text

DEMO_REQUEST = (
    "compare our pricing with the top three competitors and draft a note for the sales team"
)
# attached to the demo's request: the researcher reads it, every step gets it
DEMO_PRICE_LIST = (
    "tier,monthly price,seats\nStarter,9 EUR,1\nPro,29 EUR,5\nEnterprise,99 EUR,unlimited\n"
)

DEV_HELP = """
Flotilla is running against a local Slack workspace (offline model unless FLOTILLA_MODEL is set).
You are @{person} in #{channel}; @dev is a teammate, @alex an admin. Try:
  @Flotilla compare our pricing with the top three competitors and draft a note for the sales team
  @Flotilla research our launch emails and write a short report
  @Flotilla [ask] research our launch emails and write a short report   (an agent asks you)
  > can we also mention the free trial?        reply in the thread you last wrote in
  :answer Pro                                  answer the open form (one field)
  :answer tiers=Pro; notes=annual discount     answer a form with several fields (and Submit)
  :cancel                                      press the plan card's [Cancel plan]
  :thread                                      show the whole thread as it is now
  /flotilla help                               the slash command (agents, plans, usage, …)
  :home                                        Flotilla's App Home tab
  :as dev > text                               act once as someone else, e.g. a reply by @dev
  :as alex /flotilla agent add scout           … or the admin surface as @alex
  :submit name=value; …   :close               fill and submit, or close, an open modal
  :quit                                        stop
"""

NO_WAKE_HINT = (
    "(Flotilla has no plan at work in this thread, so it does not read replies here: "
    "start with @Flotilla to ask it something)"
)


def forms_in(driver: Driver, channel: str, thread_ts: str) -> list[Message]:
    """Flotilla's form messages of a thread that still have an input, newest first."""
    found = []
    for message in reversed(driver.state.thread(channel, thread_ts)):
        for block in message.blocks or []:
            if str(block.get("block_id", "")).startswith("form:"):
                found.append(message)
                break
    return found


def has_action(message: Message, action_id: str) -> bool:
    """Whether a message has an element `action_id` (a form's [Submit], its [Answer])."""
    return f'"action_id": "{action_id}"' in json.dumps(message.blocks or [])


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

    def __init__(self, stack: LocalStack, out: Callable[[str], None] = say) -> None:
        person = stack.people["maya"]
        super().__init__(Driver(stack.workspace), person, stack.channel, out)
        self.stack = stack
        self._edits: dict[str, str | None] = {}
        self._replies: list[Message] = []  # replies typed since the last line was handled

    def help_text(self) -> str:
        return DEV_HELP.format(person=self.person.name, channel=self.channel.name)

    async def handle(self, line: str) -> bool:
        command, _, rest = line.strip().partition(" ")
        if command == ":thread":
            self._print_thread()
        elif command == ":cancel":
            await self._cancel()
        elif command == ":answer":
            await self._answer(rest.strip())
        else:
            going_on = await super().handle(line)
            await self._hint_unheard_replies()
            return going_on
        return True

    def post(self, line: str, files: Sequence[Attachment] = ()) -> Message:
        msg = super().post(line, files)
        if msg.thread_ts and msg.thread_ts != msg.ts:
            self._replies.append(msg)
        return msg

    async def _hint_unheard_replies(self) -> None:
        """Say so when a reply without a mention will not reach the commander (no plan at
        work in that thread: people are talking among themselves)."""
        replies, self._replies = self._replies, []
        commander = self.stack.commander.bot_user_id
        for reply in replies:
            if f"<@{commander}>" in reply.text or reply.thread_ts is None:
                continue
            service = self.stack.service
            conversation = await service.find_conversation(reply.channel, reply.thread_ts)
            plan = await service.reconciler.plan(conversation.id) if conversation else None
            if plan is None or plan.status not in ("running", "paused"):
                self.out(NO_WAKE_HINT)

    async def settle(self) -> None:
        await at_rest(self.stack, self.driver)

    def show_new(self) -> None:
        super().show_new()
        state = self.driver.state
        for message in state.messages[self.channel.id].values():
            edited = (message.edited or {}).get("ts")
            if edited and self._edits.get(message.ts) != edited and "Plan (" in message.text:
                self._edits[message.ts] = edited
                card = re.sub(r"\s+", " ", render_text(state, message.text))
                self.out("(plan card updated) " + card[:200])

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
        if "=" in text and has_action(form, SUBMIT_ACTION):  # answered in the message itself
            try:
                await self.driver.click(self.person, form, SUBMIT_ACTION, values=parse_answer(text))
            except (ValueError, LookupError) as exc:  # no such field, or no such option
                self.out(f"({exc})")
        elif "=" in text:
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


async def at_rest(stack: LocalStack, driver: Driver) -> None:
    """Until Flotilla is at rest: every event delivered, no job running, nothing due in the
    outbox (a plan waiting for a person's answer is at rest)."""
    for _ in range(100):  # each round may start more work; rest comes within a few
        await driver.deliveries_settled(SETTLE_TIMEOUT)
        seen = len(stack.workspace.events.deliveries)
        await stack.service.settle()
        await driver.deliveries_settled(SETTLE_TIMEOUT)
        if len(stack.workspace.events.deliveries) == seen and not stack.service.executor.jobs:
            return


def can_open_browser(
    env: Mapping[str, str] | None = None, *, interactive: bool | None = None
) -> bool:
    """Open a browser only for a person at a terminal with a display: never in CI or tests."""
    env = os.environ if env is None else env
    if env.get("CI") or env.get("PYTEST_CURRENT_TEST"):
        return False
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if not interactive:
        return False
    # on Linux without a display webbrowser would start a text browser inside this terminal
    return not sys.platform.startswith("linux") or bool(
        env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")
    )


def page_address(stack: LocalStack, person: str = "maya") -> str:
    """The local workspace's browser page, showing the channel as `person` sees it."""
    return f"{stack.workspace.page_url}?as={person}#{stack.channel.id}"


async def dev(
    database_url: str,
    options: Options,
    *,
    open_browser: bool | None = None,
    exit_on_eof: bool = False,
) -> None:
    """Run the local stack, its browser page and a console on stdin until `:quit` or Ctrl-C
    (with `exit_on_eof`: until the end of input, once Flotilla is at rest). The page's
    address is printed first (and opened when a browser can be)."""
    stack = await start_local_stack(database_url, options=options)
    try:
        console = TrialConsole(stack)
        address = page_address(stack, console.person.name)
        console.out(f"Open the local Slack workspace in your browser: {address}")
        console.out(f"(its Web API for Slack clients: {stack.workspace.api_url})")
        if can_open_browser() if open_browser is None else open_browser:
            await asyncio.to_thread(webbrowser.open, address)
        await console.run(exit_on_eof=exit_on_eof)
    finally:
        await stack.stop()


async def _walk_to_the_form(stack: LocalStack, driver: Driver) -> tuple[Message, Message]:
    """The walkthrough up to the open form (answered in its message): the request and a
    teammate's interjection. Returns the thread's first message and the form message."""
    price_list = ("price-list.csv", DEMO_PRICE_LIST.encode(), "text/csv")
    root = driver.mention("maya", "launch", stack.commander, DEMO_REQUEST, files=[price_list])
    form = await driver.thread_has_message("launch", root.ts, containing="needs your input")
    driver.post("dev", "launch", "can we also mention the free trial?", thread_ts=root.ts)
    await driver.thread_has_message("launch", root.ts, from_="Flotilla", containing="Noted")
    return root, form


async def demo(database_url: str, options: Options) -> str:
    """Play the walkthrough's scenario and return the thread as a person sees it."""
    stack = await start_local_stack(database_url, options=options)
    try:
        driver = Driver(stack.workspace, default_timeout=60)
        root, form = await _walk_to_the_form(stack, driver)
        answer = {"field:tiers": "Pro", "field:notes": "the annual discount"}
        await driver.click("maya", form, SUBMIT_ACTION, values=answer)
        await at_rest(stack, driver)  # the plan has ended (any model: no words awaited)
        return driver.transcript("launch", root.ts)
    finally:
        await stack.stop()


SCREENSHOT_HEIGHT_MAX = 2400  # pixels: a longer thread is shown scrolled to its form


async def screenshot(path: str, database_url: str, chromium: str = "/usr/bin/chromium") -> None:
    """A PNG of the browser page: the walkthrough's thread beside the channel, whole – the
    plan card at its top, the form in its message partly filled in further down (headless
    system Chromium via Playwright, a dev extra)."""
    from playwright.async_api import async_playwright, expect

    stack = await start_local_stack(database_url, options=Options())
    try:
        driver = Driver(stack.workspace, default_timeout=60)
        root, _ = await _walk_to_the_form(stack, driver)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium, headless=True)
            try:
                page = await browser.new_page(viewport={"width": 1400, "height": 860})
                await page.goto(f"{page_address(stack)}/{root.ts}")
                thread = page.locator("#thread-messages")
                form = thread.locator(".message", has_text="needs your input")
                await form.locator(".bk-input textarea").fill("the annual discount")
                await thread.locator(".message", has_text="Noted").wait_for()
                # the page as tall as the thread, so the card and the form are both in the
                # picture (in a window of usual height the form is scrolled past the card)
                hidden = await thread.evaluate("t => t.scrollHeight - t.clientHeight")
                height = min(860 + max(hidden, 0), SCREENSHOT_HEIGHT_MAX)
                await page.set_viewport_size({"width": 1400, "height": height})
                await thread.evaluate("t => { t.scrollTop = t.scrollHeight; }")
                await expect(form).to_be_in_viewport(ratio=1)  # what the README promises
                await expect(thread.locator(".bk-header", has_text="Plan (")).to_be_in_viewport()
                await page.screenshot(path=path)
            finally:
                await browser.close()
    finally:
        await stack.stop()


if __name__ == "__main__":  # python -m flotilla.bot.trial screenshot PATH [CHROMIUM]
    import tempfile

    if len(sys.argv) not in (3, 4) or sys.argv[1] != "screenshot":
        sys.exit("usage: python -m flotilla.bot.trial screenshot PATH.png [/path/to/chromium]")
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite+aiosqlite:///{folder}/screenshot.db"
        asyncio.run(screenshot(sys.argv[2], url, *sys.argv[3:]))
    print(f"wrote {sys.argv[2]}")
