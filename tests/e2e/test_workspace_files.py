"""Files in the local workspace, through the real slack_sdk client: a person's attachment
arrives as Slack's `file_share` event, `url_private` is served only with a bot token that may
see the file, and the external upload flow (`files.getUploadURLExternal`, the bytes,
`files.completeUploadExternal`) shares a file into a thread; `files.info` describes it. Shapes
and errors are checked against the recorded samples and the method reference (tests/specs)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError

from flotilla.local_slack import Driver, LocalWorkspace
from tests.e2e.conftest import Receiver, client_for
from tests.e2e.spec_shapes import documented_errors, merged, recorded, unknown_keys

# a file_share message is a message: its sample, with the plain message's fields (`team`)
FILE_SHARE = merged(
    recorded("events/MessageFileSharePayload.json"), recorded("events/MessagePayload.json")
)
SCOPES = ["chat:write", "channels:history", "files:read", "files:write", "app_mentions:read"]


async def error_of(method: str, call: Any) -> str:
    with pytest.raises(SlackApiError) as info:
        await call
    error = str(info.value.response["error"])
    assert error in documented_errors(method), error
    return error


async def fetch(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, allow_redirects=False) as response,
    ):
        return response.status, await response.read()


async def test_an_attachment_arrives_as_slacks_file_share_event_and_downloads_with_the_token(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    app = workspace.install_app("Commander", scopes=SCOPES, request_url=receiver.url)
    outsider = workspace.install_app("Outsider", scopes=SCOPES)
    alice = workspace.add_person("alice")
    workspace.create_channel("general", [alice, app])
    driver.mention(
        "alice", "general", app, "read this", files=[("prices.csv", b"a,b\n1,2\n", None)]
    )
    await driver.wait_for(lambda: len(receiver.requests) == 2, what="mention and message events")
    events = [json.loads(body)["event"] for _, body in receiver.requests]
    message = next(e for e in events if e["type"] == "message")
    mention = next(e for e in events if e["type"] == "app_mention")
    assert message["subtype"] == "file_share" and mention["files"] == message["files"]
    file = message["files"][0]
    # the recorded sample has `shares: {}`: compare the rest, and the shares by hand
    shares = file.pop("shares")
    assert unknown_keys(message, FILE_SHARE["event"]) == []
    assert list(shares["public"]) == [message["channel"]]
    assert (file["name"], file["mimetype"], file["size"]) == ("prices.csv", "text/csv", 8)
    assert file["id"].startswith("F") and file["url_private"].startswith(workspace.base_url)

    assert await fetch(file["url_private"], app.bot_token) == (200, b"a,b\n1,2\n")
    assert (await fetch(file["url_private"]))[0] == 302  # no token: the login page, as Slack
    assert (await fetch(file["url_private"], outsider.bot_token))[0] == 404  # cannot see it
    client = client_for(workspace, app.bot_token)
    info = await client.files_info(file=file["id"])
    assert info["file"]["id"] == file["id"] and info["file"]["shares"]["public"]
    assert await error_of("files.info", client.files_info(file="FNOTAFILE1")) == "file_not_found"
    other = client_for(workspace, outsider.bot_token)
    assert await error_of("files.info", other.files_info(file=file["id"])) == "file_not_found"


async def test_the_external_upload_shares_a_file_into_a_thread_once(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    app = workspace.install_app("Writer", scopes=SCOPES)
    alice = workspace.add_person("alice")
    channel = workspace.create_channel("general", [alice, app])
    root = driver.post("alice", "general", "a thread")
    client = client_for(workspace, app.bot_token)
    data = b"# Note\n\nhello\n"
    started = await client.files_getUploadURLExternal(filename="note.md", length=len(data))
    file_id, url = started["file_id"], started["upload_url"]
    assert url.startswith(workspace.base_url)
    # not completed yet: not visible, not shareable without its bytes
    assert await error_of("files.info", client.files_info(file=file_id)) == "file_not_found"
    async with aiohttp.ClientSession() as session, session.post(url, data=data) as response:
        assert response.status == 200 and await response.text() == f"OK - {len(data)}"
    done = await client.files_completeUploadExternal(
        files=[{"id": file_id, "title": "note.md"}], channel_id=channel.id, thread_ts=root.ts
    )
    assert done["files"][0]["id"] == file_id
    shared = [m for m in driver.thread("general", root.ts) if m.files]
    assert [(m.subtype, m.bot_id, m.files) for m in shared] == [
        ("file_share", app.bot_id, [file_id])
    ]
    info = (await client.files_info(file=file_id))["file"]
    assert (info["name"], info["size"], info["mimetype"]) == ("note.md", len(data), "text/markdown")
    assert channel.id in info["shares"]["public"]
    async with aiohttp.ClientSession() as session, session.post(url, data=data) as response:
        assert response.status == 404  # an upload URL takes bytes once, until completed
    again = client.files_completeUploadExternal(files=[{"id": "FNOTAFILE1"}], channel_id=channel.id)
    assert await error_of("files.completeUploadExternal", again) == "file_not_found"
    assert "📎 note.md (text/markdown, 14 bytes)" in driver.transcript("general", root.ts)


async def test_upload_methods_check_scopes_and_arguments(workspace: LocalWorkspace) -> None:
    app = workspace.install_app("Reader", scopes=["chat:write", "files:read"])
    writer = workspace.install_app("Writer", scopes=SCOPES)
    alice = workspace.add_person("alice")
    workspace.create_channel("closed", [alice])
    client = client_for(workspace, app.bot_token)
    upload = client.files_getUploadURLExternal(filename="a.txt", length=3)
    assert await error_of("files.getUploadURLExternal", upload) == "missing_scope"
    writing = client_for(workspace, writer.bot_token)
    bad = writing.files_getUploadURLExternal(filename="a.txt", length=0)
    assert await error_of("files.getUploadURLExternal", bad) == "invalid_arguments"
    started = await writing.files_getUploadURLExternal(filename="a.txt", length=3)
    async with aiohttp.ClientSession() as session:
        async with session.post(started["upload_url"], data=b"abc") as response:
            assert response.status == 200
    closed = workspace.state.channel_named("closed").id
    refused = writing.files_completeUploadExternal(
        files=[{"id": started["file_id"]}], channel_id=closed
    )
    assert await error_of("files.completeUploadExternal", refused) == "not_in_channel"


async def test_the_browser_page_gets_a_messages_files(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    from flotilla.local_slack.web_snapshot import channel_messages

    alice = workspace.add_person("alice")
    channel = workspace.create_channel("general", [alice])
    driver.post("alice", "general", "the list", files=[("prices.csv", b"a,b\n", None)])
    (shown,) = channel_messages(workspace.state, channel.id)
    assert [(f["name"], f["mimetype"], f["size"]) for f in shown["files"]] == [
        ("prices.csv", "text/csv", 4)
    ]  # local_slack/static/messages.js draws them as 📎 lines
