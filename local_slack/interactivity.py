"""Interactivity and slash commands: `block_actions`, `view_submission` and `view_closed`
payloads POSTed form-encoded as `payload=`, slash-command forms, and working `response_url`s.
"""

from __future__ import annotations

import json
import secrets
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from flotilla.local_slack.api import WORKSPACE
from flotilla.local_slack.blocks import check_blocks, check_view
from flotilla.local_slack.events import Delivery, signed_post
from flotilla.local_slack.host import Workspace
from flotilla.local_slack.records import (
    Ephemeral,
    InstalledApp,
    Json,
    Message,
    Person,
    View,
    message_state,
)
from flotilla.local_slack.shapes import message_json
from flotilla.local_slack.web_views import assign_ids

RESPONSE_URL_TTL_SECONDS = 30 * 60
RESPONSE_URL_MAX_USES = 5


@dataclass
class ResponseTarget:
    app_id: str
    channel: str
    user: str
    issued_at: float
    message_ts: str | None = None
    thread_ts: str | None = None
    uses: int = 0


@dataclass
class SubmissionOutcome:
    """What happened to a modal after its submission was answered."""

    delivery: Delivery
    response_action: str | None
    errors: dict[str, str] = field(default_factory=dict)
    view: View | None = None  # the view now on top, None when the modal closed
    problems: list[str] | None = None  # why Slack would refuse the app's answer


def _user(ws: Workspace, person: Person) -> Json:
    return {
        "id": person.id,
        "username": person.name,
        "name": person.name,
        "team_id": ws.state.team_id,
    }


def interactivity_of(ws: Workspace) -> Interactivity:
    """The workspace's interactivity, as its class."""
    found = ws.interactivity
    assert isinstance(found, Interactivity), found
    return found


class Interactivity:
    """Builds interactivity payloads as Slack does and applies the app's answers."""

    def __init__(self, ws: Workspace, *, timeout: float = 3.0) -> None:
        self.ws = ws
        self.timeout = timeout
        self.response_targets: dict[str, ResponseTarget] = {}
        # how long and how often a response_url works (Slack: 30 minutes, 5 uses); a test
        # lowers them to see an app's fallback
        self.response_url_seconds: float = RESPONSE_URL_TTL_SECONDS
        self.response_url_uses = RESPONSE_URL_MAX_USES

    def _base(self, kind: str, person: Person, app: InstalledApp) -> Json:
        ws = self.ws
        return {
            "type": kind,
            "user": _user(ws, person),
            "api_app_id": app.app_id,
            "token": app.verification_token,
            "team": {"id": ws.state.team_id, "domain": ws.state.domain},
            "enterprise": None,
            "is_enterprise_install": False,
        }

    def response_url(self, app: InstalledApp, channel: str, user: str, **kw: Any) -> str:
        token = secrets.token_urlsafe(24)
        self.response_targets[token] = ResponseTarget(
            app.app_id, channel, user, self.ws.clock(), **kw
        )
        return f"{self.ws.base_url}respond/{token}"

    async def _send(
        self, app: InstalledApp, kind: str, payload: Json, form: dict[str, str], url: str | None
    ) -> Delivery:
        """POST the form to the app (or send it over Socket Mode); one attempt, no retries."""
        session = self.ws.events.session
        assert session is not None, "workspace not started"
        delivery = Delivery(kind, app.app_id, "", payload)
        self.ws.events.deliveries.append(delivery)
        if app.socket_mode:
            socket_kind = "slash_commands" if kind == "slash_command" else "interactive"
            attempt = await self.ws.socket_hub.send(app, socket_kind, payload, self.timeout)
            delivery.attempts.append(attempt)
        elif url:
            body = urllib.parse.urlencode(form).encode()
            ctype = "application/x-www-form-urlencoded"
            attempt = await signed_post(session, app, url, body, ctype, self.timeout)
            delivery.attempts.append(attempt)
        self.ws.state.changed()
        return delivery

    async def _send_payload(self, app: InstalledApp, payload: Json) -> Delivery:
        form = {"payload": json.dumps(payload)}
        url = app.interactivity_url or app.request_url
        return await self._send(app, payload["type"], payload, form, url)

    async def message_action(
        self, person: Person, app: InstalledApp, msg: Message, action: Json
    ) -> Delivery:
        """A person clicks an element of a message posted by `app`."""
        ws = self.ws
        payload = self._base("block_actions", person, app)
        container: Json = {
            "type": "message",
            "message_ts": msg.ts,
            "channel_id": msg.channel,
            "is_ephemeral": False,
        }
        if msg.thread_ts:
            container["thread_ts"] = msg.thread_ts
        payload.update(
            {
                "container": container,
                "trigger_id": ws.state.issue_trigger(person.id, app.app_id, ws.clock()),
                "channel": {"id": msg.channel, "name": ws.state.channels[msg.channel].name},
                "message": message_json(ws.state, msg),
                "state": {"values": message_state(msg, person.id)},
                "response_url": self.response_url(
                    app, msg.channel, person.id, message_ts=msg.ts, thread_ts=msg.thread_ts
                ),
                "actions": [action],
            }
        )
        return await self._send_payload(app, payload)

    async def view_action(
        self, person: Person, app: InstalledApp, view: View, action: Json
    ) -> Delivery:
        """A person clicks an element inside a modal or App Home view."""
        payload = self._base("block_actions", person, app)
        payload.update(
            {
                "container": {"type": "view", "view_id": view.id},
                "trigger_id": self.ws.state.issue_trigger(person.id, app.app_id, self.ws.clock()),
                "view": view.to_json(),
                "actions": [action],
            }
        )
        return await self._send_payload(app, payload)

    async def view_submission(
        self, person: Person, app: InstalledApp, view: View
    ) -> SubmissionOutcome:
        payload = self._base("view_submission", person, app)
        payload.update(
            {
                "trigger_id": self.ws.state.issue_trigger(person.id, app.app_id, self.ws.clock()),
                "view": view.to_json(),
                "response_urls": [],
            }
        )
        delivery = await self._send_payload(app, payload)
        return self._apply_submission_answer(app, view, delivery)

    def _apply_submission_answer(
        self, app: InstalledApp, view: View, delivery: Delivery
    ) -> SubmissionOutcome:
        from flotilla.local_slack.web_views import replace_view

        state = self.ws.state
        stack = state.modal_stacks.get((view.user_id, app.app_id), [])
        attempt = delivery.attempts[-1] if delivery.attempts else None
        answer: Json = {}
        if attempt is not None and attempt.status == 200 and attempt.body.strip().startswith("{"):
            answer = json.loads(attempt.body)
        action = answer.get("response_action")
        problems = _answer_problems(view, action, answer)
        if attempt is None or attempt.status != 200 or problems:
            # Slack shows "We had some trouble connecting" and leaves the modal open.
            state.changed()
            return SubmissionOutcome(delivery, action, view=view, problems=problems or None)
        if action == "errors":
            view.errors = dict(answer.get("errors", {}))
            state.changed()
            return SubmissionOutcome(delivery, action, view.errors, view)
        if action == "update":
            replace_view(view, _with_ids(answer["view"]))
            state.changed()
            return SubmissionOutcome(delivery, action, view=view)
        if action == "push":
            top = state.new_view(app, view.user_id, _with_ids(answer["view"]), view.root_view_id)
            top.previous_view_id = view.id
            stack.append(top.id)
            state.changed()
            return SubmissionOutcome(delivery, action, view=top)
        closing = list(stack) if action == "clear" else stack[-1:]
        for view_id in closing:
            state.views[view_id].closed = True
            stack.remove(view_id)
        state.changed()
        return SubmissionOutcome(delivery, action, view=state.views[stack[-1]] if stack else None)

    async def view_closed(
        self, person: Person, app: InstalledApp, view: View, *, clear: bool = False
    ) -> Delivery | None:
        """A person closes the modal (with `clear`, the header's X: the whole stack); the app
        hears of it only with `notify_on_close`."""
        stack = self.ws.state.modal_stacks.get((person.id, app.app_id), [])
        cleared = clear or bool(view.spec.get("clear_on_close"))
        for view_id in list(stack) if cleared else stack[-1:]:
            self.ws.state.views[view_id].closed = True
            stack.remove(view_id)
        self.ws.state.changed()
        if not view.spec.get("notify_on_close"):
            return None
        payload = self._base("view_closed", person, app)
        payload.update({"view": view.to_json(), "is_cleared": cleared})
        return await self._send_payload(app, payload)

    async def slash_command(
        self, person: Person, app: InstalledApp, channel_id: str, command: str, text: str
    ) -> Delivery:
        ws = self.ws
        channel = ws.state.channels[channel_id]
        response_url = self.response_url(app, channel_id, person.id)
        form = {
            "token": app.verification_token,
            "team_id": ws.state.team_id,
            "team_domain": ws.state.domain,
            "channel_id": channel_id,
            "channel_name": channel.name,
            "user_id": person.id,
            "user_name": person.name,
            "command": command,
            "text": text,
            "api_app_id": app.app_id,
            "is_enterprise_install": "false",
            "response_url": response_url,
            "trigger_id": ws.state.issue_trigger(person.id, app.app_id, ws.clock()),
        }
        url = app.commands.get(command) or app.request_url
        delivery = await self._send(app, "slash_command", dict(form), form, url)
        attempt = delivery.attempts[-1] if delivery.attempts else None
        if attempt is not None and attempt.status == 200 and attempt.body.strip():
            self.respond(response_url.rsplit("/", 1)[1], _command_answer(attempt.body))
        return delivery

    def respond(self, token: str, body: Json) -> str | None:
        """Apply a response_url message; answer an error code, or None when applied."""
        target = self.response_targets.get(token)
        if target is None or self.ws.clock() - target.issued_at > self.response_url_seconds:
            return "expired_url"
        if target.uses >= self.response_url_uses:
            return "used_url"
        blocks = body.get("blocks")
        if blocks is not None and check_blocks(blocks):
            return "invalid_blocks"
        if not body.get("text") and not blocks and not body.get("delete_original"):
            return "no_text"
        target.uses += 1
        state, app = self.ws.state, self.ws.state.apps[target.app_id]
        original = state.message(target.channel, target.message_ts) if target.message_ts else None
        if original is not None and (body.get("delete_original") or body.get("replace_original")):
            self._change_original(original, body)
        elif body.get("response_type") == "in_channel":
            msg = Message(
                channel=target.channel,
                ts=state.ts_clock.next(),
                text=str(body.get("text", "")),
                user=app.bot_user_id,
                blocks=blocks,
                bot_id=app.bot_id,
                app_id=app.app_id,
                thread_ts=body.get("thread_ts") or target.thread_ts,
            )
            state.add_message(msg)
            self.ws.events.message_posted(msg)
        else:
            state.ephemerals.append(
                Ephemeral(
                    channel=target.channel,
                    user=target.user,
                    ts=state.ts_clock.next(),
                    text=str(body.get("text", "")),
                    blocks=blocks,
                    thread_ts=body.get("thread_ts") or target.thread_ts,
                    app_id=app.app_id,
                    bot_id=app.bot_id,
                )
            )
        state.changed()
        return None

    def _change_original(self, original: Message, body: Json) -> None:
        """replace_original / delete_original on the message the interaction came from: it
        keeps its ts, author, thread and metadata; its text and blocks are the new ones."""
        state = self.ws.state
        previous = message_json(state, original)
        if body.get("delete_original"):
            original.deleted = True
            self.ws.events.message_deleted(original, previous)
            return
        original.text = str(body.get("text", ""))
        original.blocks = body.get("blocks")
        original.edited = {"user": original.user or "", "ts": state.ts_clock.next()}
        self.ws.events.message_changed(original, previous)


def _answer_problems(view: View, action: str | None, answer: Json) -> list[str]:
    """Why Slack would refuse a view_submission answer (bad view, errors for unknown blocks)."""
    if action in ("update", "push"):
        return check_view(answer.get("view"))
    if action == "errors":
        blocks = view.spec.get("blocks", [])
        inputs = {b.get("block_id") for b in blocks if b.get("type") == "input"}
        return [f"no input block {k!r}" for k in answer.get("errors", {}) if k not in inputs]
    return []


def _command_answer(body: str) -> Json:
    try:
        answer = json.loads(body)
    except ValueError:
        return {"text": body}
    return answer if isinstance(answer, dict) else {"text": body}


def _with_ids(spec: Json) -> Json:
    return assign_ids(dict(spec))


async def handle_response_url(request: web.Request) -> web.Response:

    ws = request.app[WORKSPACE]
    try:
        body = await request.json()
    except ValueError:
        return web.json_response({"ok": False, "error": "invalid_payload"}, status=400)
    error = interactivity_of(ws).respond(request.match_info["token"], body)
    if error in ("expired_url", "used_url"):
        return web.json_response({"ok": False, "error": error}, status=404)
    if error is not None:
        return web.json_response({"ok": False, "error": error}, status=400)
    return web.json_response({"ok": True})
