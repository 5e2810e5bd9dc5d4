"""Fixtures for end-to-end tests: a started local Slack workspace on an ephemeral loopback
port, a driver acting as its people, and a small receiver app for raw deliveries."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.local_slack import Driver, InstalledApp, LocalWorkspace

# Retries "nearly immediately" instead of after 1 and 5 minutes; Slack's own 3 s ack window
# (1 s missed acks – a modal's submission "had trouble connecting" – with the suite's
# parallel workers sharing 2 cores; only the tests that wait a timeout out take longer)
TEST_RETRY_DELAYS = (0.0, 0.05, 0.05)
TEST_ACK_TIMEOUT = 3.0


@pytest.fixture
async def workspace() -> AsyncIterator[LocalWorkspace]:
    ws = LocalWorkspace(ack_timeout=TEST_ACK_TIMEOUT, retry_delays=TEST_RETRY_DELAYS)
    await ws.start("127.0.0.1", 0)
    try:
        yield ws
    finally:
        await ws.stop()


@pytest.fixture
def driver(workspace: LocalWorkspace) -> Driver:
    return Driver(workspace, default_timeout=10.0)


def client_for(workspace: LocalWorkspace, token: str) -> AsyncWebClient:
    """A real slack_sdk client pointed at the local workspace."""
    return AsyncWebClient(token=token, base_url=workspace.api_url)


@contextlib.asynccontextmanager
async def serve_bolt_app(
    workspace: LocalWorkspace, app: AsyncApp, installed: InstalledApp, path: str = "/slack/events"
) -> AsyncIterator[str]:
    """Serve a Bolt AsyncApp over HTTP on an ephemeral loopback port (Bolt's own aiohttp
    adapter) and point the installed app's request URL at it; yields that URL."""
    runner = web.AppRunner(app.web_app(path=path), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}{path}"
    workspace.set_request_url(installed, url)
    try:
        yield url
    finally:
        await runner.cleanup()


@dataclass
class Receiver:
    """A bare HTTP endpoint that records what the workspace POSTs to it."""

    url: str = ""
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # statuses to answer, then 200
    answers: list[str] = field(default_factory=list)  # JSON bodies to answer, then empty
    runner: web.AppRunner | None = None


@pytest.fixture
async def receiver(workspace: LocalWorkspace) -> AsyncIterator[Receiver]:
    rec = Receiver()

    async def handle(request: web.Request) -> web.Response:
        rec.requests.append((dict(request.headers), await request.read()))
        workspace.state.changed()  # let waiters see the new request
        status = rec.statuses.pop(0) if rec.statuses else 200
        if rec.answers:
            return web.Response(
                status=status, text=rec.answers.pop(0), content_type="application/json"
            )
        return web.Response(status=status, text="")

    app = web.Application()
    app.router.add_post("/slack/events", handle)
    rec.runner = web.AppRunner(app, access_log=None)
    await rec.runner.setup()
    site = web.TCPSite(rec.runner, "127.0.0.1", 0)
    await site.start()
    port = rec.runner.addresses[0][1]
    rec.url = f"http://127.0.0.1:{port}/slack/events"
    try:
        yield rec
    finally:
        await rec.runner.cleanup()
