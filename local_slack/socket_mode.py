"""Socket Mode: `apps.connections.open` hands an app (with its xapp- token) a one-use
WebSocket URL; envelopes (`events_api`, `interactive`, `slash_commands`) then travel over the
socket and the app acks each with its `envelope_id` (and optionally a response payload).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from dataclasses import dataclass, field

from aiohttp import WSMsgType, web

from flotilla.local_slack.api import WORKSPACE, ApiError, Call, method
from flotilla.local_slack.events import Attempt
from flotilla.local_slack.host import Workspace
from flotilla.local_slack.records import InstalledApp, Json


@dataclass
class SocketHub:
    """Open Socket Mode connections per app and the acks they owe."""

    tickets: dict[str, str] = field(default_factory=dict)  # ticket -> app_id
    sockets: dict[str, list[web.WebSocketResponse]] = field(default_factory=dict)
    pending: dict[str, asyncio.Future[Json]] = field(default_factory=dict)

    def connected(self, app: InstalledApp) -> bool:
        return bool(self.sockets.get(app.app_id))

    async def send(
        self,
        app: InstalledApp,
        kind: str,
        payload: Json,
        timeout: float,
        retry_num: int = 0,
        retry_reason: str | None = None,
    ) -> Attempt:
        """Send one envelope and await its ack; status 200 when acked in time."""
        sockets = self.sockets.get(app.app_id) or []
        if not sockets:
            return Attempt(None, retry_num, "connection_failed")
        envelope_id = str(uuid.uuid4())
        envelope: Json = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": kind,
            "accepts_response_payload": kind != "events_api",
        }
        if kind == "events_api":
            envelope["retry_attempt"] = retry_num
            envelope["retry_reason"] = retry_reason or ""
        future: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self.pending[envelope_id] = future
        try:
            await secrets.choice(sockets).send_str(json.dumps(envelope))
            async with asyncio.timeout(timeout):
                ack = await future
        except TimeoutError:
            return Attempt(None, retry_num, "timeout")
        except ConnectionError:
            return Attempt(None, retry_num, "connection_failed")
        finally:
            self.pending.pop(envelope_id, None)
        return Attempt(200, retry_num, None, json.dumps(ack["payload"]) if "payload" in ack else "")

    async def close_all(self) -> None:
        for sockets in self.sockets.values():
            for ws in list(sockets):
                await ws.close()


@method("apps.connections.open")
async def connections_open(call: Call) -> Json:
    raise ApiError("not_allowed_token_type")  # reached only with a bot token


def hub_of(ws: Workspace) -> SocketHub:
    """The workspace's Socket Mode hub, as its class."""
    hub = ws.socket_hub
    assert isinstance(hub, SocketHub), hub
    return hub


async def open_connection(ws: Workspace, app: InstalledApp) -> Json:
    """The apps.connections.open answer for an app-level token."""
    if not app.socket_mode:
        raise ApiError("not_allowed_token_type")
    ticket = secrets.token_urlsafe(16)
    hub_of(ws).tickets[ticket] = app.app_id
    url = ws.base_url.replace("http://", "ws://") + f"link/?ticket={ticket}&app_id={app.app_id}"
    return {"url": url}


async def handle_socket(request: web.Request) -> web.StreamResponse:

    ws = request.app[WORKSPACE]
    hub = hub_of(ws)
    app_id = hub.tickets.pop(request.query.get("ticket", ""), None)
    if app_id is None:
        return web.Response(status=401, text="invalid ticket")
    sock = web.WebSocketResponse(autoping=True)
    await sock.prepare(request)
    hub.sockets.setdefault(app_id, []).append(sock)
    hello = {
        "type": "hello",
        "num_connections": len(hub.sockets[app_id]),
        "debug_info": {"host": "local-workspace", "approximate_connection_time": 18060},
        "connection_info": {"app_id": app_id},
    }
    await sock.send_str(json.dumps(hello))
    ws.state.changed()
    try:
        async for msg in sock:
            if msg.type != WSMsgType.TEXT:
                continue
            ack = json.loads(msg.data)
            future = hub.pending.get(str(ack.get("envelope_id")))
            if future is not None and not future.done():
                future.set_result(ack)
    finally:
        hub.sockets[app_id].remove(sock)
        ws.state.changed()
    return sock
