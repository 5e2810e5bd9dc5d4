"""The gate in front of Bolt at `/slack/events`: a request that is not Slack's is refused
before Bolt parses it (Bolt answers a JSON array or a `nan` timestamp with a 500 and a
traceback). Unsigned, badly signed or stale: 401. Signed but unparsable (not a JSON object,
nested too deep, `payload=` that is not an object, a timestamp that is not a number): 400.
Refusals are logged at most once per source address per minute.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import parse_qsl
from weakref import WeakKeyDictionary

from aiohttp import web
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp

log = logging.getLogger(__name__)
MAX_SKEW_S = 300  # Slack's replay window: a request older than five minutes is refused
MAX_BODY_BYTES = 1_000_000


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class RateLimitedLog:
    """One log line per key (a source address) per `every` seconds; the rest are counted."""

    def __init__(
        self, every: float = 60.0, *, clock: Callable[[], float] = time.monotonic, keys: int = 4096
    ) -> None:
        self.every = every
        self.clock = clock
        self.keys = keys
        self.last: dict[str, float] = {}
        self.skipped: dict[str, int] = {}

    def warning(self, key: str, message: str) -> bool:
        """Log `message` unless `key` was logged within `every` seconds; True when logged."""
        now = self.clock()
        last = self.last.get(key)
        if last is not None and now - last < self.every:
            self.skipped[key] = self.skipped.get(key, 0) + 1
            return False
        if last is None and len(self.last) >= self.keys:  # bounded: forget the oldest
            oldest = min(self.last, key=self.last.__getitem__)
            self.last.pop(oldest)
            self.skipped.pop(oldest, None)
        skipped = self.skipped.pop(key, 0)
        self.last[key] = now
        more = f" ({skipped} more refused since the last line)" if skipped else ""
        log.warning("%s%s", message, more)
        return True


class RequestGate:
    """Checks a request to `/slack/events` before Bolt sees it (see the module)."""

    def __init__(
        self,
        signing_secret: str | None,
        *,
        clock: Callable[[], float] = time.time,
        log_every: float = 60.0,
    ) -> None:
        self.secret = signing_secret or None
        self.clock = clock
        self.refusals = RateLimitedLog(log_every)

    async def refusal(self, request: web.Request) -> web.Response | None:
        """The answer to a request that is refused, or None for one Bolt may handle."""
        try:
            raw = await request.read()
            self.check(raw, request.headers)
        except Refused as refused:
            source = request.remote or "unknown"
            self.refusals.warning(source, f"refused a request from {source}: {refused.reason}")
            error = "invalid signature" if refused.status == 401 else "invalid request"
            return web.json_response({"error": error}, status=refused.status)
        return None

    def check(self, raw: bytes, headers: Mapping[str, str]) -> None:
        """Refused unless `raw` is signed (when a secret is set) and parses as Slack's."""
        if len(raw) > MAX_BODY_BYTES:
            raise Refused(400, "the body is too large")
        if self.secret is not None:
            self.check_signature(
                raw, headers.get("X-Slack-Request-Timestamp"), headers.get("X-Slack-Signature")
            )
        content_type = (headers.get("Content-Type") or "").split(";")[0]  # as Bolt reads it
        parse_slack_body(raw, content_type or None)

    def check_signature(self, raw: bytes, timestamp: str | None, signature: str | None) -> None:
        if not timestamp or not signature:
            raise Refused(401, "no signature")
        if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
            raise Refused(400, "the timestamp is not a number")
        if abs(self.clock() - int(timestamp)) > MAX_SKEW_S:
            raise Refused(401, "a stale timestamp")
        assert self.secret is not None
        base = b"v0:" + timestamp.encode() + b":" + raw
        expected = "v0=" + hmac.new(self.secret.encode(), base, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
            raise Refused(401, "a bad signature")


def parse_slack_body(raw: bytes, content_type: str | None) -> None:
    """Refused(400) unless `raw` parses the way Bolt will parse it, into a JSON object (or a
    slash command's form)."""
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(400, "the body is not UTF-8") from None
    if not body:
        raise Refused(400, "an empty body")
    try:  # the same choice Bolt makes (slack_bolt.request.internals.parse_body)
        if content_type == "application/json" or body.startswith("{"):
            _json_object(body)
        elif "payload" in body:
            payload = dict(parse_qsl(body, keep_blank_values=True)).get("payload")
            if payload is None:
                raise Refused(400, "a form without a payload")
            _json_object(payload)
        elif "command" not in dict(parse_qsl(body, keep_blank_values=True)):
            raise Refused(400, "a form that is not a slash command")
    except (ValueError, RecursionError):
        raise Refused(400, "the body is not JSON") from None


def _json_object(text: str) -> None:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise Refused(400, "the body is not a JSON object")
    try:
        _Envelope.model_validate(value)
    except ValidationError as exc:
        raise Refused(400, f"not the shape Slack sends ({exc.error_count()} problems)") from None


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


SlackName = Annotated[str, StringConstraints(max_length=255)]  # Slack's limit for ids it echoes


class _Action(_Shape):
    action_id: Annotated[str, StringConstraints(min_length=1, max_length=255)]
    block_id: SlackName = ""


class _View(_Shape):
    type: str
    callback_id: SlackName  # Slack always sends it ("" for a view made without one)


class _Event(_Shape):
    type: str


Ref = dict[str, Any] | str | None  # Bolt reads `user`, `team`, … as an object or an id


class _Envelope(_Shape):
    """What Bolt itself assumes of a payload before any listener sees it (it answers 500 with
    a traceback otherwise); the fields Flotilla reads are checked by its listeners."""

    type: Literal[
        "event_callback",
        "url_verification",
        "app_rate_limited",
        "block_actions",
        "view_submission",
        "view_closed",
    ]
    team_id: SlackName | None = None  # every event_callback carries it
    user: Ref = None
    team: Ref = None
    channel: Ref = None
    enterprise: Ref = None
    container: dict[str, Any] | None = None
    message: dict[str, Any] | None = None
    authorizations: list[dict[str, Any]] | None = None
    actions: Annotated[list[_Action], Field(min_length=1)] | None = None
    view: _View | None = None
    event: _Event | None = None

    @model_validator(mode="after")
    def _parts_of_its_type(self) -> _Envelope:
        needed = {
            "block_actions": self.actions,
            "view_submission": self.view,
            "view_closed": self.view,
            "event_callback": self.event,
        }
        if self.type in needed and needed[self.type] is None:
            raise ValueError(f"a {self.type} payload without its main part")
        if self.type == "event_callback" and not self.team_id:
            raise ValueError("an event_callback without its team_id")
        return self


_GATES: WeakKeyDictionary[Any, RequestGate] = WeakKeyDictionary()


def gate_for(app: AsyncApp) -> RequestGate:
    """The gate of a Bolt app: its signing secret when it verifies signatures (one gate per
    app, so the per-source log limit holds across requests)."""
    gate = _GATES.get(app)
    if gate is None:
        from slack_bolt.middleware.request_verification.async_request_verification import (
            AsyncRequestVerification,
        )

        # Bolt keeps the secret in its verification middleware, present only when enabled
        verifying = [
            m for m in app._async_middleware_list if isinstance(m, AsyncRequestVerification)
        ]
        gate = RequestGate(verifying[0].verifier.signing_secret if verifying else None)
        _GATES[app] = gate
    return gate


async def dispatch(app: AsyncApp, request: web.Request) -> web.Response:
    """A request to `/slack/events`: refused by the gate, or handed to Bolt."""
    from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

    gate = gate_for(app)
    refused = await gate.refusal(request)
    if refused is not None:
        return refused
    try:
        bolt_request = await to_bolt_request(request)
        _probe(bolt_request.body)
    except Exception as exc:  # a body Bolt cannot read (its context extraction assumes shapes)
        source = request.remote or "unknown"
        gate.refusals.warning(source, f"refused a request from {source}: {type(exc).__name__}")
        return web.json_response({"error": "invalid request body"}, status=400)
    return await to_aiohttp_response(await app.async_dispatch(bolt_request))


def _probe(body: dict[str, Any]) -> None:
    """What Bolt extracts for every listener and middleware (raises where Bolt would)."""
    from slack_bolt.request import payload_utils as p

    for extract in (
        p.to_options,
        p.to_shortcut,
        p.to_action,
        p.to_view,
        p.to_command,
        p.to_event,
        p.to_message,
        p.to_step,
    ):
        extract(body)
