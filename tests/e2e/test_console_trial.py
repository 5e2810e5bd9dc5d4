"""The terminal console of the local workspace and of `flotilla dev`: one help banner, the
page's address, `:home` shown, `:as NAME /command` and modals, a hint for unheard replies;
`flotilla dev` as a process reading a pipe (the README's walkthrough, paced) or /dev/null
(then served through its browser page), each answer's text printed once it is complete."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.bot.local import LocalStack, start_local_stack
from flotilla.bot.service import Options
from flotilla.bot.trial import NO_WAKE_HINT, TrialConsole, can_open_browser, dev
from flotilla.local_slack import Driver, InstalledApp, LocalWorkspace
from flotilla.local_slack.console import END_OF_INPUT, Console
from tests.e2e.conftest import serve_bolt_app
from tests.e2e.flotilla_process import ROOT

REQUEST = "compare our pricing with the top three competitors and draft a note for the sales team"
PLAIN = "plain_text"


def ticket_app(installed: InstalledApp, client: AsyncWebClient) -> AsyncApp:
    app = AsyncApp(client=client, signing_secret=installed.signing_secret)

    @app.command("/ticket")
    async def on_command(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        view = {
            "type": "modal",
            "callback_id": "ticket",
            "private_metadata": body["channel_id"],
            "title": {"type": PLAIN, "text": "Ticket"},
            "submit": {"type": PLAIN, "text": "File"},
            "blocks": [
                {
                    "type": "input",
                    "block_id": "title",
                    "label": {"type": PLAIN, "text": "Title"},
                    "element": {
                        "type": "plain_text_input",
                        "action_id": "value",
                        "initial_value": body["text"],
                    },
                },
                {
                    "type": "input",
                    "block_id": "tags",
                    "optional": True,
                    "label": {"type": PLAIN, "text": "Tags"},
                    "element": {
                        "type": "checkboxes",
                        "action_id": "value",
                        "options": [
                            {"text": {"type": PLAIN, "text": t}, "value": t}
                            for t in ("urgent", "hardware")
                        ],
                    },
                },
            ],
        }
        await client.views_open(trigger_id=body["trigger_id"], view=view)

    @app.view("ticket")
    async def on_submit(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        values = body["view"]["state"]["values"]
        tags = [o["value"] for o in values["tags"]["value"]["selected_options"]]
        title = values["title"]["value"]["value"]
        text = f"<@{body['user']['id']}> filed {title} {json.dumps(tags)}"
        await client.chat_postMessage(channel=body["view"]["private_metadata"], text=text)

    @app.event("app_home_opened")
    async def on_home(event: dict[str, Any], client: AsyncWebClient) -> None:
        blocks = [{"type": "header", "text": {"type": PLAIN, "text": "Your tickets"}}]
        await client.views_publish(user_id=event["user"], view={"type": "home", "blocks": blocks})

    return app


@pytest.fixture
async def console_app(workspace: LocalWorkspace) -> AsyncIterator[tuple[Console, list[str]]]:
    installed = workspace.install_app(
        "TicketBot",
        scopes=["chat:write", "commands", "users:read"],
        bot_events=["app_home_opened"],
        commands={"/ticket": None},
    )
    alice, bob = workspace.add_person("alice"), workspace.add_person("bob", admin=True)
    channel = workspace.create_channel("general", [alice, bob, installed])
    client = AsyncWebClient(token=installed.bot_token, base_url=workspace.api_url)
    lines: list[str] = []
    async with serve_bolt_app(workspace, ticket_app(installed, client), installed):
        yield Console(Driver(workspace), alice, channel, out=lines.append), lines


async def shows(console: Console, lines: list[str], text: str) -> None:
    """Await `text` among what the console printed (it prints on every state change)."""

    def printed() -> bool:
        console.show_new()
        return any(text in line for line in lines)

    await console.driver.wait_for(printed, what=f"the console to show {text!r}")


async def test_home_renders_and_as_runs_a_command_and_its_modal(
    console_app: tuple[Console, list[str]],
) -> None:
    console, lines = console_app
    assert "\n".join(lines) == ""
    assert console.help_text().count(":as NAME") == 1 and "bob" in console.help_text()
    await console.handle(":home")
    await shows(console, lines, "== Your tickets ==")
    assert any(line == "(TicketBot Home, as @alice sees it)" for line in lines)

    await console.handle(":as bob /ticket printer on fire")
    await shows(console, lines, "only visible to @bob: a modal")
    assert "Title: [printer on fire]" in lines[-1]
    await console.handle(":submit title=x")
    assert lines[-1] == "(@alice has no modal open)"
    await console.handle(":as bob :submit title=")  # a required field left empty is refused
    assert lines[-1] == "('Title' is required)"
    await console.handle(":as bob :submit title=Printer; tags=urgent, hardware")
    await shows(console, lines, 'filed Printer ["urgent", "hardware"]')
    assert any("@bob filed" in line for line in lines)
    await console.handle(":as nobody hello")
    assert lines[-1] == "(no one called 'nobody' here)"
    await console.handle("/unknown")
    assert lines[-1] == "(/unknown is not a valid command here)"


def test_a_browser_opens_only_for_a_person_at_a_terminal_with_a_display() -> None:
    desktop = {"DISPLAY": ":0"}
    assert can_open_browser(desktop, interactive=True) is True
    assert can_open_browser({**desktop, "CI": "true"}, interactive=True) is False
    assert can_open_browser(desktop, interactive=False) is False
    assert can_open_browser({}, interactive=None) is False  # pytest's stdin is no terminal


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[LocalStack]:
    started = await start_local_stack(
        f"sqlite+aiosqlite:///{tmp_path / 'console.db'}",
        options=Options(),
        ack_timeout=2.0,
        retry_delays=(0.0, 0.05, 0.05),
    )
    try:
        yield started
    finally:
        await started.stop()


async def test_trial_hints_when_a_reply_would_not_wake_the_commander(stack: LocalStack) -> None:
    lines: list[str] = []
    console = TrialConsole(stack, out=lines.append)
    await console.handle("lunch anyone?")
    await console.handle("> sure")  # no plan in this thread: people talk among themselves
    assert lines[-1] == NO_WAKE_HINT
    await console.handle(f"@Flotilla {REQUEST}")
    root = stack.workspace.state.thread(stack.channel.id, console.thread_ts or "")[0]
    driver = Driver(stack.workspace, default_timeout=20)
    await driver.thread_has_message(stack.channel.id, root.ts, containing="needs your input")
    shown = len(lines)
    await console.handle(":as dev > can we also mention the free trial?")  # the plan waits
    assert NO_WAKE_HINT not in lines[shown:]
    await driver.thread_has_message(stack.channel.id, root.ts, containing="Noted")
    await stack.service.settle()  # the commander's turn ends before the stack stops


async def test_trial_answers_a_form_of_several_fields_in_its_message(stack: LocalStack) -> None:
    lines: list[str] = []
    console = TrialConsole(stack, out=lines.append)
    await console.handle(f"@Flotilla {REQUEST}")
    root = stack.workspace.state.thread(stack.channel.id, console.thread_ts or "")[0]
    driver = Driver(stack.workspace, default_timeout=20)
    await driver.thread_has_message(stack.channel.id, root.ts, containing="needs your input")
    await console.handle(":answer notes=the annual discount")  # the tier left out: told so
    await shows(console, lines, "(only visible to you) Nothing was recorded yet")
    await console.handle(":answer tiers=Pro")  # what was typed before is kept
    answered = await driver.thread_has_message(stack.channel.id, root.ts, containing="Answered by")
    assert "Pro" in answered.text and "the annual discount" in answered.text
    assert not [m for m, _ in stack.workspace.api_log if m == "views.open"]  # no modal
    await driver.thread_has_message(
        stack.channel.id, root.ts, containing="[offline model] commander:"
    )
    await stack.service.settle()


async def test_dev_prints_the_page_address_and_one_help_banner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b":quit\n")
    os.close(write_end)
    monkeypatch.setattr("sys.stdin", os.fdopen(read_end))
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", opened.append)
    await dev(f"sqlite+aiosqlite:///{tmp_path / 'dev.db'}", Options(), open_browser=True)
    out = capsys.readouterr().out
    address = next(line for line in out.splitlines() if line.startswith("Open the local Slack"))
    assert "/client/?as=maya#C" in address and opened == [address.rsplit(" ", 1)[1]]
    assert out.count("You are @maya in #launch") == 1
    assert out.count(":as alex /flotilla") == 1


async def test_trial_console_tries_the_admin_surface_as_alex(stack: LocalStack) -> None:
    lines: list[str] = []
    console = TrialConsole(stack, out=lines.append)
    await console.handle(":as alex /flotilla agent add scout")
    await shows(console, lines, "only visible to @alex: a modal")
    await console.handle(":as alex :submit description=Finds leads.; system_prompt=Be brief.")
    await shows(console, lines, "(only visible to @alex) scout is added.")  # *scout* in bold
    await console.handle(":home Flotilla")
    await shows(console, lines, "(Flotilla Home, as @maya sees it)")
    assert "scout" in lines[-1] and "[Add an agent]" not in lines[-1]  # maya is no admin
    assert all(line.startswith(("┌", "│")) for line in lines[-1].splitlines())  # one frame


async def test_the_console_shows_an_apps_status_line_once(
    console_app: tuple[Console, list[str]],
) -> None:
    console, lines = console_app
    app = console.driver.state.app_by_bot_user(console.driver.person("ticketbot").id)
    assert app is not None
    root = console.post("anyone there?")
    client = AsyncWebClient(token=app.bot_token, base_url=console.driver.ws.api_url)
    await client.assistant_threads_setStatus(
        channel_id=root.channel, thread_ts=root.ts, status="is thinking…"
    )
    await shows(console, lines, "    (TicketBot is thinking…)")
    console.show_new()
    assert sum("is thinking" in line for line in lines) == 1


async def test_dev_reads_a_file_and_with_exit_on_eof_stops_at_its_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "script.txt"
    script.write_text("@Flotilla hi, who are you?\n")  # a file: no pipe, no terminal
    with script.open() as stdin:
        monkeypatch.setattr("sys.stdin", stdin)
        await dev(f"sqlite+aiosqlite:///{tmp_path / 'dev.db'}", Options(), exit_on_eof=True)
    out = capsys.readouterr().out
    assert "» @Flotilla hi, who are you?" in out
    assert "[offline model] You asked: “hi, who are you?”" in out  # the answer, at rest
    assert END_OF_INPUT not in out


# --- `flotilla dev` as a process --------------------------------------------------------

WALKTHROUGH = (  # README: "The local trial", typed into a pipe all at once
    f"@Flotilla {REQUEST}\n"
    "> can we also mention the free trial?\n"
    ":answer tiers=Pro; notes=the annual discount\n"
)
# a line of each answer: the researcher's, the analyst's, the writer's note, the commander's
DIAMOND_ANSWERS = (
    "- Acme: Starter €12, Pro €35, Enterprise €120; 10 % off when paid yearly",
    "- Pro €29: up to 5 seats, integrations and single sign-on, priority support",
    "- Pro (€29 a month) is 17 % below Acme (€35), 9 % below Globex (€32) and 26 % below "
    "Initech (€39).",
    "[offline model] commander: Done. The note for the sales team is ready for your review",
)
CHAIN_REQUEST = "@Flotilla research our launch emails and write a short report"
CHAIN_ANSWERS = (
    "1. The announcement email was opened by 48 % of recipients",
    "The follow-ups lost a third and then half of those readers",
    "[offline model] commander: Done. The report is above.",
)
BOUND = 180.0  # seconds: a bound on a hung process, never a wait in itself


class DevProcess:
    """`flotilla dev` in a child process, as a script runs it: stdout read as it comes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.out: list[str] = []
        self.err: list[str] = []
        self._changed = asyncio.Condition()
        self.process: asyncio.subprocess.Process | None = None
        self._readers: list[asyncio.Task[None]] = []

    async def start(self, *args: str, stdin: int | Any) -> None:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("FLOTILLA_", "SLACK_", "OPENAI_", "ANTHROPIC_"))
            and key != "PYTHONUNBUFFERED"  # the console flushes what it prints by itself
        }
        # not paced like Slack's one message a second per channel: the same, sooner
        env.update(
            PYTHONPATH=str(ROOT), PYDANTIC_AI_NO_BANNER="1", FLOTILLA_CHANNEL_POSTS_PER_SECOND="0"
        )
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "flotilla.bot.cli",
            "dev",
            *args,
            cwd=self.folder,
            env=env,
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        self._readers = [
            asyncio.create_task(self._read(self.process.stdout, self.out)),
            asyncio.create_task(self._read(self.process.stderr, self.err)),
        ]

    async def _read(self, stream: asyncio.StreamReader, into: list[str]) -> None:
        async for raw in stream:
            async with self._changed:
                into.append(raw.decode(errors="replace").rstrip("\n"))
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    @property
    def text(self) -> str:
        return "\n".join(self.out)

    def tail(self) -> str:
        """The end of what it printed and logged, for a failure's message."""
        return "\n".join(["stdout:", *self.out[-60:], "stderr:", *self.err[-30:]])

    async def shows(self, text: str) -> str:
        """The first line printed that contains `text` (awaited as the process prints)."""
        try:
            async with asyncio.timeout(BOUND), self._changed:
                while (hit := next((line for line in self.out if text in line), None)) is None:
                    if all(r.done() for r in self._readers):
                        raise AssertionError(f"dev ended without {text!r}:\n{self.tail()}")
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"dev did not print {text!r}:\n{self.tail()}") from None
        return hit

    async def exit_code(self) -> int:
        assert self.process is not None
        try:
            async with asyncio.timeout(BOUND):
                code = await self.process.wait()
                await asyncio.gather(*self._readers)
        except TimeoutError:
            raise AssertionError(f"dev did not exit:\n{self.tail()}") from None
        return code

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        for reader in self._readers:
            reader.cancel()


@pytest.fixture
async def dev_process(tmp_path: Path) -> AsyncIterator[DevProcess]:
    process = DevProcess(tmp_path)
    try:
        yield process
    finally:
        await process.stop()


async def test_dev_reads_a_pipe_paced_and_prints_every_answer_once(
    dev_process: DevProcess,
) -> None:
    await dev_process.start("--exit-on-eof", stdin=asyncio.subprocess.PIPE)
    assert dev_process.process is not None and dev_process.process.stdin is not None
    dev_process.process.stdin.write(WALKTHROUGH.encode())
    dev_process.process.stdin.close()  # all at once: each line waits for the rest it needs

    assert await dev_process.exit_code() == 0, "\n".join(dev_process.err[-30:])
    out = dev_process.text
    for answer in DIAMOND_ANSWERS:
        assert out.count(answer) == 1, f"{answer!r} not printed once:\n{out}"
    # the reply reached a plan at work: it steered the writer, whose note says so
    assert "Noted – added to the next step's instructions" in out and NO_WAKE_HINT not in out
    assert "- We offer a 14-day free trial on every tier, no card needed." in out
    assert "(no open form in this thread)" not in out
    assert "(plan card updated) Plan (5 steps) – completed, 5 of 5 done" in out
    assert not re.search(r"\[offline mod(?!el\])", out)  # no partial text of a stream
    assert "*" not in out.split("» :answer", 1)[1]  # bold shown as words, not as *mrkdwn*
    assert END_OF_INPUT not in out and "Traceback" not in "\n".join(dev_process.err)


async def test_dev_with_no_input_serves_the_page_and_prints_its_answers(
    dev_process: DevProcess,
) -> None:
    with open(os.devnull, "rb") as nothing:
        await dev_process.start(stdin=nothing)
    address = (await dev_process.shows("Open the local Slack workspace")).rsplit(" ", 1)[1]
    await dev_process.shows(END_OF_INPUT)  # /dev/null ended at once: the page keeps serving
    page, channel = address.split("?", 1)[0], address.rsplit("#", 1)[1]
    async with aiohttp.ClientSession() as http:
        body = {"type": "post", "user": "maya", "channel": channel, "text": CHAIN_REQUEST}
        async with http.post(page + "act", json=body) as response:
            assert (await response.json())["ok"] is True
    for answer in CHAIN_ANSWERS:
        await dev_process.shows(answer)
    assert dev_process.process is not None
    dev_process.process.send_signal(signal.SIGINT)  # Ctrl-C
    assert await dev_process.exit_code() == 130
    err = "\n".join(dev_process.err)
    assert "Traceback" not in err and "PermissionError" not in err
    assert all(dev_process.text.count(answer) == 1 for answer in CHAIN_ANSWERS)
