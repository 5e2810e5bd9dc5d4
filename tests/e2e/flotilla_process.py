"""`flotilla run` as a real child process, configured like an operator would (environment
only), against the local Slack workspace; its JSON log lines are read as they come."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flotilla.local_slack import InstalledApp, LocalWorkspace

ROOT = Path(__file__).resolve().parents[2]
Line = dict[str, Any]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FlotillaProcess:
    """One `python -m flotilla.bot.cli run` for `app` of `workspace` (Socket Mode if the app has an
    app-level token, else HTTP)."""

    def __init__(
        self,
        workspace: LocalWorkspace,
        app: InstalledApp,
        database_url: str,
        folder: Path,
        **settings: str,
    ) -> None:
        self.port = free_port()
        self.folder = folder
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("FLOTILLA_", "SLACK_", "OPENAI_", "ANTHROPIC_"))
        }
        # Socket Mode when the app has an app-level token, else HTTP with the signing secret
        secret = {"SLACK_APP_TOKEN": app.app_token} if app.app_token else {}
        secret = secret or {"SLACK_SIGNING_SECRET": app.signing_secret}
        self.env.update(
            PYTHONPATH=str(ROOT),
            PYDANTIC_AI_NO_BANNER="1",
            SLACK_BOT_TOKEN=app.bot_token,
            **secret,
            SLACK_API_URL=workspace.api_url,
            FLOTILLA_DATABASE_URL=database_url,
            FLOTILLA_HTTP_HOST="127.0.0.1",
            FLOTILLA_HTTP_PORT=str(self.port),
            FLOTILLA_LOG_FORMAT="json",
            **settings,
        )
        if not app.app_token:
            workspace.set_request_url(app, f"{self.url}/slack/events")
        self.lines: list[Line] = []
        self.raw: list[str] = []
        self._changed = asyncio.Condition()
        self.process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "flotilla.bot.cli",
            "run",
            cwd=self.folder,
            env=self.env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        async for raw in self.process.stderr:
            text = raw.decode(errors="replace").rstrip("\n")
            async with self._changed:
                self.raw.append(text)
                with contextlib.suppress(ValueError):
                    self.lines.append(json.loads(text))
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    async def line(self, predicate: Callable[[Line], bool], timeout: float = 60.0) -> Line:
        """The first JSON log line matching `predicate` (awaited as the process writes)."""

        def found() -> Line | None:
            return next((line for line in self.lines if predicate(line)), None)

        async with asyncio.timeout(timeout), self._changed:
            while (hit := found()) is None:
                if self._reader is not None and self._reader.done():
                    raise AssertionError("the process ended:\n" + "\n".join(self.raw[-30:]))
                await self._changed.wait()
        return hit

    async def started(self) -> Line:
        return await self.line(lambda line: str(line.get("message", "")).startswith("Flotilla "))

    async def terminate(self, sig: signal.Signals = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send `sig` and await the exit code."""
        assert self.process is not None
        self.process.send_signal(sig)
        return await self.wait(timeout)

    async def wait(self, timeout: float = 60.0) -> int:
        assert self.process is not None
        async with asyncio.timeout(timeout):
            code = await self.process.wait()
            if self._reader is not None:
                await self._reader
        return code

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
