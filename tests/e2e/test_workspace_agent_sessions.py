"""agents.sessions.setStatus in the local workspace, through slack_sdk: a thread's session
created on first use, its status changes recorded, and errors as the method reference
documents them; a method can be refused on demand (`feature_disabled`)."""

from __future__ import annotations

from typing import Any

import pytest
from slack_sdk.errors import SlackApiError

from flotilla.local_slack import Driver, LocalWorkspace
from flotilla.local_slack.web_agent_sessions import session_of
from tests.e2e.conftest import client_for
from tests.e2e.spec_shapes import documented_errors

METHOD = "agents.sessions.setStatus"


async def test_a_threads_session_goes_through_its_statuses(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    alice = workspace.add_person("alice")
    app = workspace.install_app("Commander")
    channel = workspace.create_channel("general", [alice, app])
    parent = driver.post("alice", "general", "compare the prices")
    client = client_for(workspace, app.bot_token)
    first = await client.agents_sessions_setStatus(
        channel_id=channel.id,
        thread_ts=parent.ts,
        status="processing",
        title="Compare the prices",
        initiator_user_id=alice.id,
    )
    assert first["status"] == first["agent_status"] == "processing"
    for status in ("suspended", "processing", "closed"):
        answer = await client.agents_sessions_setStatus(
            channel_id=channel.id, thread_ts=parent.ts, status=status, title="ignored"
        )
        assert answer["title"] == "Compare the prices"  # taken when the session was made
    session = session_of(workspace.state, channel.id, parent.ts, app.app_id)
    assert session is not None and session.initiator == alice.id
    assert session.history == ["processing", "suspended", "processing", "closed"]


async def test_session_errors_are_the_documented_ones(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    alice = workspace.add_person("alice")
    app, outsider = workspace.install_app("One"), workspace.install_app("Two")
    channel = workspace.create_channel("general", [alice, app])
    parent = driver.post("alice", "general", "go")
    client = client_for(workspace, app.bot_token)
    base: dict[str, Any] = {"channel_id": channel.id, "thread_ts": parent.ts}
    cases = [
        (client, {**base, "status": "thinking"}, "invalid_status"),
        (client, {"channel_id": channel.id, "status": "active"}, "thread_ts_required"),
        (client, {**base, "channel_id": "C000NONE", "status": "active"}, "channel_not_found"),
        (client, {**base, "status": "active", "initiator_user_id": "U000NONE"}, "user_not_found"),
        (client_for(workspace, outsider.bot_token), {**base, "status": "active"}, "not_authorized"),
    ]
    for who, arguments, expected in cases:
        with pytest.raises(SlackApiError) as info:
            await who.agents_sessions_setStatus(**arguments)
        error = info.value.response.data["error"]
        assert error == expected and expected in documented_errors(METHOD)

    workspace.refuse(METHOD, "feature_disabled")
    with pytest.raises(SlackApiError) as info:
        await client.agents_sessions_setStatus(**base, status="active")
    assert info.value.response.data["error"] == "feature_disabled"
    assert "feature_disabled" in documented_errors(METHOD)
