"""The ways to run Flotilla: `flotilla run` (HTTP and Socket Mode), `dev` and `demo`."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from flotilla.bot.cli import main
from flotilla.bot.local import _manifest_scopes_and_events
from flotilla.bot.serve import run as serve
from flotilla.bot.service import Options
from flotilla.bot.settings import Settings
from flotilla.bot.trial import TrialConsole, demo
from flotilla.local_slack import Driver, LocalWorkspace
from tests.e2e.slice.conftest import FAST_RETRIES, REQUEST


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[None]:
    ready = asyncio.Event()
    task = asyncio.create_task(serve(settings, ready=ready))
    done, _ = await asyncio.wait(
        [task, asyncio.create_task(ready.wait())], return_when=asyncio.FIRST_COMPLETED
    )
    if task in done:
        task.result()  # raises what stopped it
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_flotilla_run_answers_in_a_thread(
    mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = LocalWorkspace(ack_timeout=2.0, retry_delays=FAST_RETRIES)
    await workspace.start()
    try:
        scopes, events = _manifest_scopes_and_events()
        app = workspace.install_app(
            "Flotilla", scopes=scopes, bot_events=events, socket_mode=mode == "socket"
        )
        maya = workspace.add_person("maya")
        workspace.create_channel("launch", [maya, app])
        port = free_port()
        env = {
            "SLACK_BOT_TOKEN": app.bot_token,
            "SLACK_API_URL": workspace.api_url,
            "FLOTILLA_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'run.db'}",
            "FLOTILLA_HTTP_HOST": "127.0.0.1",
            "FLOTILLA_HTTP_PORT": str(port),
        }
        if mode == "socket":
            env["SLACK_APP_TOKEN"] = app.app_token or ""
        else:
            env["SLACK_SIGNING_SECRET"] = app.signing_secret
            workspace.set_request_url(app, f"http://127.0.0.1:{port}/slack/events")
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.chdir(tmp_path)
        async with running(Settings()):
            driver = Driver(workspace, default_timeout=20)
            root = driver.mention("maya", "launch", app, REQUEST)
            await driver.thread_has_message("launch", root.ts, containing="needs your input")
            assert "Plan (5 steps)" in driver.transcript("launch", root.ts)
            async with aiohttp.ClientSession() as http:
                base = f"http://127.0.0.1:{port}"
                async with http.get(f"{base}/metrics") as response:
                    metrics = await response.text()
                    assert 'flotilla_dispatches_total{kind="agent"} 2.0' in metrics
                    # tokens are counted per workspace, agent and model
                    team = workspace.state.team_id
                    assert any(
                        line.startswith("flotilla_model_tokens_total{")
                        and f'workspace="{team}"' in line
                        and 'agent="researcher"' in line
                        for line in metrics.splitlines()
                    )
                async with http.post(f"{base}/slack/events", data="{}") as response:
                    # HTTP mode verifies signatures; Socket Mode takes no requests here at all
                    assert response.status == (401 if mode == "http" else 404)
    finally:
        await workspace.stop()


def test_run_refuses_to_start_without_tokens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET"):
        monkeypatch.delenv(name, raising=False)
    assert main(["run"]) == 3  # a configuration mistake (EXIT_CONFIG)
    assert "SLACK_BOT_TOKEN is not set" in capsys.readouterr().err
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    assert main(["run"]) == 3  # a configuration mistake (EXIT_CONFIG)
    assert "HTTP mode needs SLACK_SIGNING_SECRET" in capsys.readouterr().err


async def test_demo_plays_the_walkthrough(tmp_path: Path) -> None:
    transcript = await demo(f"sqlite+aiosqlite:///{tmp_path / 'demo.db'}", Options())
    assert "5 ✅ Review and post the synthesis" in transcript
    assert "✅ Answered by @maya" in transcript
    assert "Also, as asked in the thread: can we also mention the free trial?" in transcript
    lines = transcript.rstrip().splitlines()
    last = max(i for i, line in enumerate(lines) if " APP  " in line)  # the last message
    final = [line.strip() for line in lines[last:]]
    assert final[1].startswith("[offline model] commander:")
    assert final[-1] == "[👍] [👎]"  # the final answer takes feedback
    # files both ways: the attached price list is read, the writer's note is posted and passed on
    assert "📎 price-list.csv (text/csv, 82 bytes)" in transcript
    assert "- read price-list.csv: tier,monthly price,seats; Starter,9 EUR,1;" in transcript
    assert "📎 note.md (text/markdown," in transcript and "📎 `note.md`" in transcript
    assert "ready for your review (in note.md, above)" in final[1]
    # the note follows the form (Pro, the annual discount) and the thread (the free trial)
    assert "- Pro (€29 a month) is 17 % below Acme (€35), 9 % below Globex (€32)" in transcript
    assert "- Paying yearly takes two months off (about 17 %)." in transcript
    assert "- We offer a 14-day free trial on every tier, no card needed." in transcript


async def test_dev_console_drives_a_plan(start: Callable[..., Any]) -> None:
    async with start() as run:
        shown: list[str] = []
        console = TrialConsole(run.stack, out=shown.append)
        await console.handle(":answer Pro")
        assert shown[-1] == "(no open form in this thread)"
        await console.handle(
            "@Flotilla compare our pricing with the top three competitors and draft a note"
        )
        assert console.thread_ts is not None
        root = run.driver.state.thread(run.stack.channel.id, console.thread_ts)[0]
        await run.says(root, "needs your input")
        await console.handle(":answer tiers=Pro; notes=annual discount")
        await run.says(root, "[offline model] commander:")
        await run.says(root, "5 ✅")  # the card's last edit may come after the answer
        await run.quiesce()
        console.show_new()
        await console.handle(":thread")
        assert "5 ✅" in shown[-1]
        assert any(line.startswith("(plan card updated)") for line in shown)
        assert await console.handle(":quit") is False
