"""Socket Mode: the same minimal Bolt AsyncApp connects with slack_bolt's own
AsyncSocketModeHandler (aiohttp) and works over the WebSocket instead of HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.local_slack import Driver, InstalledApp, LocalWorkspace
from tests.e2e.conftest import client_for
from tests.e2e.test_workspace_bolt_app import EVENTS, SCOPES, tiny_app


@pytest.fixture
async def socket_app(workspace: LocalWorkspace, driver: Driver) -> AsyncIterator[InstalledApp]:
    installed = workspace.install_app(
        "TinyBot", scopes=SCOPES, bot_events=EVENTS, socket_mode=True, commands={"/ticket": None}
    )
    alice = workspace.add_person("alice")
    workspace.create_channel("general", [alice, installed])
    client = AsyncWebClient(token=installed.bot_token, base_url=workspace.api_url)
    assert installed.app_token is not None
    handler = AsyncSocketModeHandler(tiny_app(installed, client), installed.app_token)
    await handler.connect_async()  # type: ignore[no-untyped-call]
    try:
        await driver.wait_for(lambda: workspace.socket_hub.connected(installed), what="connect")
        yield installed
    finally:
        await handler.close_async()  # type: ignore[no-untyped-call]


async def test_bolt_over_socket_mode_answers_and_validates_a_modal(
    socket_app: InstalledApp, driver: Driver
) -> None:
    msg = driver.mention("alice", "general", socket_app, "ticket please")
    reply = await driver.thread_has_message("general", msg.ts, from_="tinybot")
    delivery = await driver.click("alice", reply, "open_form")
    assert delivery.acked
    await driver.wait_for(lambda: driver.state.top_modal(driver.person("alice").id) is not None)
    outcome = await driver.submit("alice", {"title": "abc"})
    assert outcome.errors == {"title_block": "At least 5 characters"}
    outcome = await driver.submit("alice", {"title": "Database failover"})
    assert outcome.view is None
    await driver.thread_has_message("general", msg.ts, containing="Created ticket")


async def test_app_tokens_only_open_connections(
    socket_app: InstalledApp, workspace: LocalWorkspace
) -> None:
    assert socket_app.app_token is not None
    app_client = client_for(workspace, socket_app.app_token)
    opened = await app_client.apps_connections_open(app_token=socket_app.app_token)
    assert opened["url"].startswith("ws://127.0.0.1:")
    with pytest.raises(SlackApiError) as wrong_method:
        await app_client.auth_test()
    assert wrong_method.value.response.data["error"] == "not_allowed_token_type"
    bot = client_for(workspace, socket_app.bot_token)
    with pytest.raises(SlackApiError) as wrong_token:
        await bot.apps_connections_open(app_token=socket_app.bot_token)
    assert wrong_token.value.response.data["error"] == "not_allowed_token_type"


async def test_slash_commands_over_socket_mode_ack_with_a_message(
    socket_app: InstalledApp, driver: Driver
) -> None:
    delivery = await driver.slash_command("alice", "general", "/ticket", "vpn down")
    assert delivery.acked
    assert [e.text for e in driver.ephemerals("alice")] == ["Filing vpn down…"]
    await driver.wait_for(
        lambda: any(
            m.text == "Ticket filed: vpn down"
            for c in driver.state.messages.values()
            for m in c.values()
        ),
        what="the in_channel response",
    )
