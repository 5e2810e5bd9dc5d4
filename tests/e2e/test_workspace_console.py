"""The terminal trial's console: typed lines become posts, mentions, replies and commands."""

from __future__ import annotations

from pathlib import Path

from flotilla.local_slack import Driver, LocalWorkspace
from flotilla.local_slack.console import Console
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
