"""The Web API over HTTP: `/api/<method>` with form-encoded, JSON or query arguments and the
token in `Authorization: Bearer` (or a `token` argument). Errors are HTTP 200 with
`{"ok": false, "error": "…"}` like Slack; rate limiting is HTTP 429 with `Retry-After`.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

# Importing the method modules registers their handlers in METHODS (the modules themselves,
# not the package: the package's __init__ imports this module).
import flotilla.local_slack.web_agent_sessions  # noqa: F401
import flotilla.local_slack.web_assistant  # noqa: F401
import flotilla.local_slack.web_chat  # noqa: F401
import flotilla.local_slack.web_conversations  # noqa: F401
import flotilla.local_slack.web_files  # noqa: F401
import flotilla.local_slack.web_stream  # noqa: F401
import flotilla.local_slack.web_views  # noqa: F401
from flotilla.local_slack.api import METHODS, WORKSPACE, ApiError, Call
from flotilla.local_slack.host import Workspace
from flotilla.local_slack.interactivity import handle_response_url
from flotilla.local_slack.records import Json
from flotilla.local_slack.socket_mode import handle_socket
from flotilla.local_slack.web_files import add_file_routes
from flotilla.local_slack.web_page import add_page_routes


async def read_args(request: web.Request) -> dict[str, Any]:
    """Merge query parameters with a form-encoded or JSON body, as Slack accepts them."""
    args: dict[str, Any] = dict(request.query)
    if request.method != "POST" or not request.can_read_body:
        return args
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except ValueError:
            raise ApiError("invalid_json") from None
        if not isinstance(body, dict):
            raise ApiError("invalid_json")
        args.update(body)
    else:
        form = await request.post()
        args.update({k: v for k, v in form.items() if isinstance(v, str)})
    return args


def token_of(request: web.Request, args: dict[str, Any]) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip() or None
    token = args.get("token")
    return str(token) if token else None


def _answer(body: Json, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(body, status=status, headers=headers)


async def handle_api(request: web.Request) -> web.Response:
    ws: Workspace = request.app[WORKSPACE]
    name = request.match_info["method"]
    try:
        args = await read_args(request)
        handler = METHODS.get(name)
        if handler is None:
            raise ApiError("unknown_method")
        token = token_of(request, args)
        if token is None:
            raise ApiError("not_authed")
        if token.startswith("xapp-"):
            return await _app_token_call(ws, name, token)
        app = ws.state.app_by_token(token)
        if app is None:
            raise ApiError("invalid_auth")
        refusal = ws.refusals.get(name)
        if refusal is not None:  # a feature switched off on demand (see LocalWorkspace.refuse)
            raise ApiError(refusal)
        retry_after = ws.rate_limiter.retry_after(name, app.app_id, _channel_key(args))
        if retry_after is not None:
            return _answer(
                {"ok": False, "error": "ratelimited"}, 429, {"Retry-After": str(retry_after)}
            )
        result = await handler(Call(name, app, args, ws))
    except ApiError as exc:
        ws.api_log.append((name, exc.error))
        return _answer({"ok": False, "error": exc.error, **exc.extra})
    ws.api_log.append((name, "ok"))
    scopes = ",".join(sorted(app.scopes))
    return _answer({"ok": True, **result}, headers={"X-OAuth-Scopes": scopes})


async def _app_token_call(ws: Workspace, name: str, token: str) -> web.Response:
    """App-level tokens may only open Socket Mode connections."""
    from flotilla.local_slack.socket_mode import open_connection

    app = ws.state.app_by_app_token(token)
    if app is None:
        raise ApiError("invalid_auth")
    if name != "apps.connections.open":
        raise ApiError("not_allowed_token_type")
    result = await open_connection(ws, app)
    ws.api_log.append((name, "ok"))
    return _answer({"ok": True, **result})


def _channel_key(args: dict[str, Any]) -> str | None:
    channel = args.get("channel")
    return str(channel) if channel else None


def build_app(ws: Workspace) -> web.Application:
    """The aiohttp application: Web API, response_url endpoint, Socket Mode, the browser page
    (/client/) and a health check."""
    app = web.Application()
    app[WORKSPACE] = ws
    app.router.add_route("*", "/api/{method}", handle_api)
    app.router.add_post("/respond/{token}", handle_response_url)
    app.router.add_get("/link/", handle_socket)
    app.router.add_get("/", _health)
    add_page_routes(app)
    add_file_routes(app)
    return app


async def _health(request: web.Request) -> web.Response:
    ws: Workspace = request.app[WORKSPACE]
    return web.json_response({"ok": True, "team_id": ws.state.team_id, "api_url": ws.api_url})
