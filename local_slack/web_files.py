"""files.getUploadURLExternal, files.completeUploadExternal, files.info; the upload URL and
the private download URL they point at (served by this workspace, as Slack's file host)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from flotilla.local_slack.api import WORKSPACE, ApiError, Call, method
from flotilla.local_slack.files import LocalFile
from flotilla.local_slack.host import Workspace
from flotilla.local_slack.records import Channel, Json, Message
from flotilla.local_slack.web_chat import persona, writable_channel

FILENAME_MAX = 255
TITLE_MAX = 255


def _visible(call: Call, file: LocalFile) -> bool:
    """An app sees files it uploaded, files a person gave it in a form, and files shared
    where its bot is a member."""
    if file.app_id == call.app.app_id or call.app.app_id in file.granted:
        return True
    channels = call.state.channels
    return any(c in channels and call.app.bot_user_id in channels[c].members for c in file.channels)


@method("files.getUploadURLExternal")
async def get_upload_url(call: Call) -> Json:
    call.require_scope("files:write")
    filename = call.str_arg("filename", required=True) or ""
    length_arg = call.arg("length", required=True)
    try:
        length = int(length_arg)
    except (TypeError, ValueError):
        raise ApiError("invalid_arguments") from None
    if length < 1 or len(filename) > FILENAME_MAX:
        raise ApiError("invalid_arguments")
    file = call.state.files.add(
        filename, None, user=call.app.bot_user_id, app_id=call.app.app_id, length=length
    )
    return {"upload_url": call.state.files.upload_url(file), "file_id": file.id}


def _file_list(call: Call) -> list[dict[str, Any]]:
    files = call.json_arg("files", "invalid_arguments")
    if not isinstance(files, list) or not files or len(files) > 100:
        raise ApiError("invalid_arguments")
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise ApiError("invalid_arguments")
        if len(str(entry.get("title") or "")) > TITLE_MAX:
            raise ApiError("invalid_arguments")
    return files


@method("files.completeUploadExternal")
async def complete_upload(call: Call) -> Json:
    call.require_scope("files:write")
    entries = _file_list(call)
    store = call.state.files
    files: list[LocalFile] = []
    for entry in entries:
        file = store.files.get(entry["id"])
        if file is None or file.app_id != call.app.app_id or file.data is None:
            raise ApiError("file_not_found")
        files.append(file)
    channel: Channel | None = None
    if call.str_arg("channel_id") or call.str_arg("channels"):
        call.args.setdefault("channel", call.str_arg("channel_id") or call.str_arg("channels"))
        channel = writable_channel(call)
    for file, entry in zip(files, entries, strict=True):
        file.completed = True
        if entry.get("title"):
            file.title = str(entry["title"])
    for token in [t for t, f in store.uploads.items() if f in {x.id for x in files}]:
        del store.uploads[token]
    if channel is not None:
        _share(call, channel, files)
    call.state.changed()
    return {"files": [{"id": f.id, "title": f.title} for f in files]}


def _share(call: Call, channel: Channel, files: list[LocalFile]) -> None:
    """The files in a message in the channel (or the thread `thread_ts` names)."""
    username, icons = persona(call)
    thread_ts = call.str_arg("thread_ts") or None
    msg = Message(
        channel=channel.id,
        ts=call.state.ts_clock.next(),
        text=call.str_arg("initial_comment") or "",
        user=None if username or icons else call.app.bot_user_id,
        bot_id=call.app.bot_id,
        app_id=call.app.app_id,
        username=username,
        icons=icons,
        thread_ts=thread_ts,
        subtype="file_share",
        files=[f.id for f in files],
    )
    for file in files:
        file.channels.append(channel.id)
        file.shares.setdefault(channel.id, []).append(msg.ts)
    call.state.add_message(msg)
    call.ws.events.message_posted(msg)


@method("files.info")
async def info(call: Call) -> Json:
    call.require_scope("files:read")
    file_id = call.str_arg("file", required=True) or ""
    file = call.state.files.files.get(file_id)
    if file is None or not file.completed or not _visible(call, file):
        raise ApiError("file_not_found")
    shaped = call.state.files.shape(call.state.team_id, file, domain=call.state.domain)
    return {"file": shaped, "comments": [], "response_metadata": {"next_cursor": ""}}


# --- the upload URL and the file host ----------------------------------------------------


async def handle_upload(request: web.Request) -> web.Response:
    """The bytes of an external upload (Slack answers `OK - <length>`)."""
    ws: Workspace = request.app[WORKSPACE]
    store = ws.state.files
    file_id = store.uploads.get(request.match_info["token"])
    file = store.files.get(file_id or "")
    if file is None or file.completed:
        return web.Response(status=404, text="Not Found")
    data = await request.read()
    if not data:
        return web.Response(status=400, text="Bad Request")
    file.data = data
    ws.state.changed()
    return web.Response(text=f"OK - {len(data)}")


async def handle_download(request: web.Request) -> web.Response:
    """A file's bytes for a bot token that may see it; people's sessions are not modelled."""
    ws: Workspace = request.app[WORKSPACE]
    header = request.headers.get("Authorization", "")
    token = header[7:].strip() if header.lower().startswith("bearer ") else ""
    app = ws.state.app_by_token(token) if token else None
    team_file = request.match_info["team_file"]
    file = ws.state.files.files.get(team_file.rsplit("-", 1)[-1])
    if app is None:
        return web.Response(status=302, headers={"Location": ws.base_url + "?redir=login"})
    if file is None or file.data is None or "files:read" not in app.scopes:
        return web.Response(status=404, text="Not Found")
    channels = ws.state.channels
    visible = (
        file.app_id == app.app_id
        or app.app_id in file.granted
        or any(c in channels and app.bot_user_id in channels[c].members for c in file.channels)
    )
    if not visible:
        return web.Response(status=404, text="Not Found")
    ws.state.files.downloads.append((file.id, app.app_id))
    return web.Response(body=file.data, content_type=file.mimetype.split(";")[0])


def add_file_routes(app: web.Application) -> None:
    app.router.add_post("/upload/{token}", handle_upload)
    app.router.add_get("/files-pri/{team_file}/{name}", handle_download)
