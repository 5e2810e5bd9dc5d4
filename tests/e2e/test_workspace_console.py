"""The terminal trial's console: typed lines become posts, mentions, replies and commands."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from flotilla.local_slack import Driver, LocalWorkspace
from flotilla.local_slack.__main__ import main as local_slack_main
from flotilla.local_slack.console import END_OF_INPUT, Console, read_lines
from tests.e2e.conftest import Receiver, client_for


async def test_console_posts_mentions_replies_and_shows_what_the_person_sees(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    alice = workspace.add_person("alice")
    app = workspace.install_app("Flotilla", request_url=receiver.url, commands={"/flotilla": None})
    channel = workspace.create_channel("general", [alice, app])
    lines: list[str] = []
    console = Console(driver, alice, channel, out=lines.append)
    assert await console.handle("@Flotilla plan a launch")
    first = driver.thread("general", console.thread_ts or "")[0]
    assert first.text == f"<@{app.bot_user_id}> plan a launch"
    await client_for(workspace, app.bot_token).chat_postMessage(
        channel=channel.id, thread_ts=first.ts, text="On it"
    )
    assert await console.handle("> thanks")
    assert [m.text for m in driver.thread("general", first.ts)[1:]] == ["On it", "thanks"]
    assert await console.handle("/flotilla status")
    assert receiver.requests  # the command reached the app
    console.show_new()
    text = "\n".join(lines)
    assert "@flotilla plan a launch" in text and "    Flotilla APP" in text and "On it" in text
    assert not await console.handle(":quit")


async def test_attach_posts_a_file_and_says_why_when_it_cannot(
    workspace: LocalWorkspace, driver: Driver, tmp_path: Path
) -> None:
    alice = workspace.add_person("alice")
    app = workspace.install_app("Flotilla")
    channel = workspace.create_channel("general", [alice, app])
    lines: list[str] = []
    console = Console(driver, alice, channel, out=lines.append)
    prices = tmp_path / "prices.csv"
    prices.write_text("tier,price\nPro,29\n")
    assert await console.handle(f":attach {prices} @Flotilla compare these")
    first = driver.thread("general", console.thread_ts or "")[0]
    assert first.text == f"<@{app.bot_user_id}> compare these" and first.subtype == "file_share"
    file = workspace.state.files.files[first.files[0]]
    assert (file.name, file.mimetype, file.data) == ("prices.csv", "text/csv", prices.read_bytes())
    assert await console.handle(f":attach {prices} > and again")
    assert [len(m.files) for m in driver.thread("general", first.ts)] == [1, 1]
    assert await console.handle(f":attach {tmp_path / 'missing.txt'} hello")
    assert await console.handle(":attach")
    console.show_new()
    text = "\n".join(lines)
    assert "cannot read" in text and "missing.txt" in text and "usage: :attach PATH" in text
    assert "📎 prices.csv (text/csv, 18 bytes)" in text


async def test_a_streamed_answer_is_shown_once_whole_when_its_stream_stops(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    alice = workspace.add_person("alice")
    app = workspace.install_app("Writer")
    channel = workspace.create_channel("general", [alice, app])
    lines: list[str] = []
    console = Console(driver, alice, channel, out=lines.append)
    parent = console.post("draft it please")
    client = client_for(workspace, app.bot_token)
    started = await client.chat_startStream(
        channel=channel.id,
        thread_ts=parent.ts,
        recipient_user_id=alice.id,
        recipient_team_id=workspace.state.team_id,
        markdown_text="[offline mod",
    )
    console.show_new()
    assert lines[-1].startswith("    Writer APP  ") and lines[-1].endswith("(typing…)")
    assert "[offline mod" not in "\n".join(lines)  # no partial text
    shown = len(lines)
    await client.chat_appendStream(
        channel=channel.id, ts=started["ts"], markdown_text="el] *Pro* is 17 % below Acme."
    )
    console.show_new()
    assert len(lines) == shown  # growing text is not printed again and again
    await client.chat_stopStream(channel=channel.id, ts=started["ts"])
    console.show_new()
    console.show_new()
    assert lines[shown:] == [lines[shown]] and "(typing…)" not in lines[shown]
    assert lines[shown].splitlines()[1:] == ["      [offline model] Pro is 17 % below Acme."]


async def test_ephemeral_messages_read_as_slack_shows_them(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    alice = workspace.add_person("alice")
    app = workspace.install_app("Flotilla", scopes=["chat:write"])
    channel = workspace.create_channel("general", [alice, app])
    lines: list[str] = []
    console = Console(driver, alice, channel, out=lines.append)
    await client_for(workspace, app.bot_token).chat_postEphemeral(
        channel=channel.id,
        user=alice.id,
        text=f"*Usage since 1 May*\n• <#{channel.id}> – 1,313 tokens\n_Feedback_: none &amp; more",
    )
    console.show_new()
    assert lines == [
        "(only visible to you) Usage since 1 May\n• #general – 1,313 tokens\nFeedback: none & more"
    ]


async def test_lines_are_read_from_a_file_dev_null_and_a_pipe(tmp_path: Path) -> None:
    script = tmp_path / "script.txt"
    script.write_bytes("@Flotilla hi\n> café ".encode() + b"\xff\n")  # a byte that is no UTF-8
    with script.open() as stream:
        assert [line async for line in read_lines(stream)] == ["@Flotilla hi\n", "> café \ufffd\n"]
    with open(os.devnull) as stream:
        assert [line async for line in read_lines(stream)] == []
    read_end, write_end = os.pipe()
    with os.fdopen(read_end) as stream, os.fdopen(write_end, "w") as writer:
        lines = read_lines(stream)
        writer.write(":home\n:qu")
        writer.flush()
        assert await anext(lines) == ":home\n"  # a line as soon as it is there
        writer.write("it")
        writer.close()
        assert [line async for line in lines] == [":quit"]  # the last line without "\n"


async def test_the_standalone_workspace_stops_at_the_end_of_input_when_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    script = tmp_path / "script.txt"
    script.write_text("hello from a script\n")
    with script.open() as stdin:
        monkeypatch.setattr("sys.stdin", stdin)
        await local_slack_main(["--port", "0", "--people", "alice", "--exit-on-eof"])
    out = capsys.readouterr().out
    assert "» hello from a script" in out and "\nalice  " in out  # posted, then shown
    assert END_OF_INPUT not in out
