"""The workspace in the browser: a Slack-like page served by the workspace itself.

    GET  /client/            the page (static HTML, CSS and JS; no build step, works offline)
    GET  /client/state       what one person sees, as JSON (`?user=U…`; see web_snapshot.py)
    GET  /client/events      the same, pushed as Server-Sent Events on every state change
    POST /client/act         a person acts: post, slash command, click, submit, close, open Home

Actions go through the workspace's own paths (the driver and `Interactivity`), so apps
receive the same signed events and payloads as from a person in Slack.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from flotilla.local_slack.api import WORKSPACE
from flotilla.local_slack.console import mentions_to_slack
from flotilla.local_slack.driver import Driver, block_action, input_value
from flotilla.local_slack.host import Workspace
from flotilla.local_slack.interactivity import interactivity_of
from flotilla.local_slack.records import Json, Message, Person, View
from flotilla.local_slack.state import WorkspaceState
from flotilla.local_slack.web_snapshot import snapshot

PAGE_PATH = "/client/"
STATIC = Path(__file__).parent / "static"
KEEPALIVE_SECONDS = 15.0


class PageError(Exception):
    """A refused page action, as a sentence for the person."""


@dataclass
class PageHub:
    """Tells open event streams to end when the workspace stops."""

    closing: bool = False


HUB: web.AppKey[PageHub] = web.AppKey("page_hub")


def add_page_routes(app: web.Application) -> None:
    """Serve the page under /client/ on the workspace's aiohttp application."""
    app[HUB] = PageHub()
    app.router.add_get("/client", _redirect)
    app.router.add_get(PAGE_PATH, _index)
    app.router.add_static(PAGE_PATH + "static/", STATIC)
    app.router.add_get(PAGE_PATH + "state", _state)
    app.router.add_get(PAGE_PATH + "events", _events)
    app.router.add_post(PAGE_PATH + "act", _act)
    app.on_shutdown.append(_close_streams)


def _workspace(request: web.Request) -> Workspace:
    return request.app[WORKSPACE]


def _viewer(ws: Workspace, who: str | None) -> Person:
    """The person the page is for: by id or name; the first person when not given."""
    people = [p for p in ws.state.people.values() if not p.is_bot]
    for person in people:
        if who in (person.id, person.name):
            return person
    if who or not people:
        raise web.HTTPNotFound(text=f"no person {who!r} in this workspace")
    return people[0]


async def _redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound(PAGE_PATH + (f"?{request.query_string}" if request.query_string else ""))


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


async def _state(request: web.Request) -> web.Response:
    ws = _workspace(request)
    viewer = _viewer(ws, request.query.get("user"))
    return web.json_response(snapshot(ws.state, viewer, ws.clock()))


async def _events(request: web.Request) -> web.StreamResponse:
    """Server-Sent Events: the viewer's snapshot now and after every change of the state."""
    ws = _workspace(request)
    viewer = _viewer(ws, request.query.get("user"))
    hub = request.app[HUB]
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    )
    await response.prepare(request)
    state = ws.state
    try:
        while not hub.closing:
            sent = state.version
            data = json.dumps(snapshot(state, viewer, ws.clock()), separators=(",", ":"))
            await response.write(f"event: state\ndata: {data}\n\n".encode())
            try:
                await state.wait_for(_news(state, sent, hub), KEEPALIVE_SECONDS)
            except TimeoutError:  # sent again: keeps the stream alive, status lines time out
                pass
    except ConnectionResetError:  # the page was closed or reloaded
        pass
    return response


def _news(state: WorkspaceState, sent: int, hub: PageHub) -> Callable[[], bool]:
    return lambda: state.version != sent or hub.closing


async def _close_streams(app: web.Application) -> None:

    app[HUB].closing = True
    app[WORKSPACE].state.changed()  # wake the streams so they end before the server waits


async def _act(request: web.Request) -> web.Response:
    ws = _workspace(request)
    if request.content_type != "application/json":  # other sites' pages cannot send this
        return web.json_response({"ok": False, "error": "Send JSON."}, status=415)
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        return web.json_response({"ok": False, "error": "Send a JSON object."}, status=400)
    person = _viewer(ws, str(body.get("user") or "") or None)
    handler = ACTIONS.get(str(body.get("type")))
    if handler is None:
        return web.json_response({"ok": False, "error": "Unknown action."}, status=400)
    try:
        result = await handler(PageAct(ws, person, body))
    except (PageError, PermissionError, LookupError, ValueError) as exc:
        return web.json_response({"ok": False, "error": _sentence(exc)})
    return web.json_response({"ok": True, **result})


def _sentence(exc: Exception) -> str:
    text = str(exc.args[0]) if exc.args else str(exc)
    return text[:1].upper() + text[1:]


@dataclass
class PageAct:
    """One action from the page: who acts and its JSON arguments."""

    ws: Workspace
    person: Person
    args: Json

    @property
    def driver(self) -> Driver:
        return Driver(self.ws)

    def text(self, name: str) -> str:
        return str(self.args.get(name) or "")

    def view(self) -> View:
        view = self.ws.state.views.get(self.text("view_id"))
        if view is None or view.closed or view.user_id != self.person.id:
            raise PageError("this view is no longer open")
        return view

    def message(self) -> Message:
        msg = self.ws.state.message(self.text("channel"), self.text("ts"))
        if msg is None:
            raise PageError("this message no longer exists")
        return msg


async def _post(act: PageAct) -> Json:
    text = act.text("text").strip()
    if not text:
        raise PageError("type a message first")
    thread_ts = act.text("thread_ts") or None
    slack_text = mentions_to_slack(act.driver, text)
    msg = act.driver.post(
        act.person,
        act.text("channel"),
        slack_text,
        thread_ts=thread_ts,
        broadcast=bool(act.args.get("broadcast")),
    )
    return {"ts": msg.ts}


async def _command(act: PageAct) -> Json:
    command, text = act.text("command"), act.text("text")
    for app in act.ws.state.apps.values():
        if command in app.commands:
            channel = act.ws.state.channel_named(act.text("channel"))
            delivery = await interactivity_of(act.ws).slash_command(
                act.person, app, channel.id, command, text
            )
            return {"acked": delivery.acked}
    raise PageError(f"{command} is not a valid command")


async def _message_action(act: PageAct) -> Json:
    msg = act.message()
    app = act.ws.state.apps.get(msg.app_id or "")
    if app is None:
        raise PageError("only messages from apps have interactive elements")
    element = find_element(msg.blocks or [], act.text("block_id"), act.text("action_id"))
    _take_message_values(msg, act.person, act.args.get("values"))
    action = block_action(
        element, act.text("block_id"), act.args.get("value"), act.ws.state.ts_clock.next()
    )
    delivery = await interactivity_of(act.ws).message_action(act.person, app, msg, action)
    return {"acked": delivery.acked}


def _take_message_values(msg: Message, person: Person, values: Any) -> None:
    """What the person typed into the message's inputs, kept as their client's state."""
    typed = msg.typed.setdefault(person.id, {})
    for block_id, action_id, entry in _typed_entries(msg.blocks or [], values):
        typed.setdefault(block_id, {})[action_id] = entry


def _take_values(view: View, values: Any) -> None:
    """Record what the person typed or picked in the view's inputs (Slack's `state.values`)."""
    for block_id, action_id, entry in _typed_entries(view.spec.get("blocks", []), values):
        view.state_values.setdefault(block_id, {})[action_id] = entry


def _typed_entries(blocks: list[Any], values: Any) -> Iterator[tuple[str, str, Any]]:
    """(block_id, action_id, state entry) for each input block the page sent a value for
    (`values`: {block_id: {action_id: value}}, "" for an emptied input)."""
    if not isinstance(values, dict):
        return
    for block in blocks:
        element = block.get("element")
        if block.get("type") != "input" or not isinstance(element, dict):
            continue
        given = values.get(block.get("block_id"), {})
        action_id = element.get("action_id")
        if isinstance(given, dict) and isinstance(action_id, str) and action_id in given:
            value = given[action_id] if given[action_id] != "" else None
            yield str(block["block_id"]), action_id, input_value(element, value)


async def _view_action(act: PageAct) -> Json:
    view = act.view()
    _take_values(view, act.args.get("values"))
    app = act.ws.state.apps[view.app_id]
    block_id, action_id = act.text("block_id"), act.text("action_id")
    element = find_element(view.spec.get("blocks", []), block_id, action_id)
    action = block_action(element, block_id, act.args.get("value"), act.ws.state.ts_clock.next())
    delivery = await interactivity_of(act.ws).view_action(act.person, app, view, action)
    return {"acked": delivery.acked}


async def _submit(act: PageAct) -> Json:
    view = act.view()
    _take_values(view, act.args.get("values"))
    missing = required_missing(view)
    if missing:  # Slack's client refuses these itself; the app never hears of it
        view.errors = {block_id: "Please complete this required field." for block_id in missing}
        act.ws.state.changed()
        return {"errors": view.errors}
    outcome = await interactivity_of(act.ws).view_submission(
        act.person, act.ws.state.apps[view.app_id], view
    )
    if outcome.problems or not outcome.delivery.acked:
        raise PageError("We had some trouble connecting. Try again?")
    return {"errors": outcome.errors}


def required_missing(view: View) -> list[str]:
    """Block ids of required inputs that hold no value."""
    missing = []
    for block in view.spec.get("blocks", []):
        if block.get("type") != "input" or block.get("optional", False):
            continue
        entry = view.state_values.get(block["block_id"], {}).get(block["element"]["action_id"])
        if not entry or all(v in (None, "", []) for k, v in entry.items() if k != "type"):
            missing.append(block["block_id"])
    return missing


async def _close(act: PageAct) -> Json:
    """The modal's Close button goes back one view; its X (`all`) closes the whole stack."""
    view = act.view()
    app = act.ws.state.apps[view.app_id]
    await interactivity_of(act.ws).view_closed(
        act.person, app, view, clear=bool(act.args.get("all"))
    )
    return {}


async def _open_app(act: PageAct) -> Json:
    """The person opens an app's Home or Messages tab (Slack sends `app_home_opened`)."""
    app = act.ws.state.apps.get(act.text("app_id"))
    if app is None:
        raise PageError("no such app")
    tab = "messages" if act.text("tab") == "messages" else "home"
    dm, _ = act.ws.state.dm(act.person.id, app.bot_user_id)
    act.ws.events.app_home_opened(app, act.person.id, tab)
    return {"channel": dm.id}


async def _join(act: PageAct) -> Json:
    channel = act.ws.state.channel_named(act.text("channel"))
    if channel.is_private or channel.is_im:
        raise PageError("private channels need an invitation")
    act.ws.state.join(channel.id, act.person.id)
    return {}


ACTIONS = {
    "post": _post,
    "command": _command,
    "message_action": _message_action,
    "view_action": _view_action,
    "submit": _submit,
    "close": _close,
    "open_app": _open_app,
    "join": _join,
}


def find_element(blocks: list[Json], block_id: str, action_id: str) -> Json:
    """The interactive element `action_id` of block `block_id`."""
    for block in blocks:
        if block.get("block_id") != block_id:
            continue
        with_elements = block.get("type") in ("actions", "context_actions")
        candidates = list(block.get("elements", [])) if with_elements else []
        candidates += [block[k] for k in ("accessory", "element") if isinstance(block.get(k), dict)]
        for element in candidates:
            if isinstance(element, dict) and element.get("action_id") == action_id:
                return element
    raise PageError("this element is no longer there")
