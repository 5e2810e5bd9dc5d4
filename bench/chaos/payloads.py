"""Generated bad input for the Slack edge (hypothesis strategies): random JSON values and
bodies that are not JSON at all, and Slack's own payloads – `event_callback` (mention,
message, App Home), `block_actions` (the plan card's Cancel, a form's [Submit] with its
inputs in `state.values`), `view_submission`, slash commands – with one field
broken (a wrong type, a missing or huge value, an id or `ts` of the wrong shape), and odd
`X-Slack-Request-Timestamp` headers (`nan`, `inf`, negative, far away)."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

JSON_TYPE = "application/json"
FORM_TYPE = "application/x-www-form-urlencoded"

LEAF = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
JSON_VALUES = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
# a value no field Flotilla reads accepts where it is put (never None: some fields may be)
WRONG = (
    st.booleans()
    | st.integers()
    | st.floats()
    | st.lists(JSON_VALUES, max_size=3)
    | st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=3)
    | st.text(alphabet="abcxyz !?<>{}\u00e9\u202e", max_size=30)
    | st.just("Z" * 5000)
    | st.just("")
    | st.just("nan")
)
ODD_TIMESTAMPS = st.sampled_from(
    ["nan", "inf", "-inf", "-1", "0", "1e30", "", "abc", "99999999999999999999"]
)
MISSING = object()  # a field removed instead of replaced


@dataclass(frozen=True)
class Ids:
    """The real ids of the workspace the input is sent to (only the broken field is wrong)."""

    team: str
    app: str
    bot_user: str
    user: str
    channel: str
    verification_token: str


@dataclass(frozen=True)
class BadRequest:
    kind: str  # which template or generator
    body: bytes
    content_type: str
    timestamp: str | None = None  # an odd timestamp header instead of now


def templates(ids: Ids, unique: int) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Slack payloads as Slack sends them, and the fields to break."""
    ts = f"1700000000.{unique:06d}"

    def envelope(event: dict[str, Any]) -> dict[str, Any]:
        return {
            "token": ids.verification_token,
            "team_id": ids.team,
            "api_app_id": ids.app,
            "type": "event_callback",
            "event_id": f"EvCHAOS{unique:08d}",
            "event_time": 1,
            "event": event,
        }

    mention = envelope(
        {
            "type": "app_mention",
            "user": ids.user,
            "text": f"<@{ids.bot_user}> do it",
            "ts": ts,
            "channel": ids.channel,
            "event_ts": ts,
        }
    )
    message = envelope(
        {
            "type": "message",
            "user": ids.user,
            "text": "more",
            "ts": ts,
            "channel": ids.channel,
            "thread_ts": "1700000000.000001",
            "channel_type": "channel",
            "event_ts": ts,
        }
    )
    home = envelope(
        {
            "type": "app_home_opened",
            "user": ids.user,
            "channel": "D0CHAOS",
            "tab": "home",
            "event_ts": ts,
        }
    )
    click = {
        "type": "block_actions",
        "user": {"id": ids.user},
        "team": {"id": ids.team},
        "api_app_id": ids.app,
        "trigger_id": "1.2.3",
        "container": {
            "type": "message",
            "message_ts": ts,
            "channel_id": ids.channel,
            "thread_ts": "1700000000.000001",
        },
        "response_url": "http://127.0.0.1:9/response",
        "actions": [
            {
                "type": "button",
                "action_id": "flotilla_plan_cancel",
                "value": "1",
                "action_ts": "1.0",
            }
        ],
    }
    key = "form:1:1:1:1"
    submit = {  # a form's [Submit] in its message: the inputs travel in state.values
        "type": "block_actions",
        "user": {"id": ids.user},
        "team": {"id": ids.team},
        "api_app_id": ids.app,
        "trigger_id": "1.2.4",
        "container": {
            "type": "message",
            "message_ts": ts,
            "channel_id": ids.channel,
            "thread_ts": "1700000000.000001",
        },
        "response_url": "http://127.0.0.1:9/response",
        "actions": [
            {
                "type": "button",
                "action_id": "flotilla_form_submit_inline",
                "block_id": key,
                "value": key,
                "action_ts": "1.0",
            }
        ],
        "state": {
            "values": {"field:tiers": {"value": {"type": "plain_text_input", "value": "Pro"}}}
        },
    }
    private = {"key": key, "channel": ids.channel, "thread_ts": "1700000000.000001"}
    submission = {
        "type": "view_submission",
        "user": {"id": ids.user},
        "team": {"id": ids.team},
        "api_app_id": ids.app,
        "view": {
            "id": "V1",
            "type": "modal",
            "callback_id": "flotilla_form_submit",
            "state": {"values": {}},
            "private_metadata": json.dumps(private),
        },
    }
    return {
        "mention": (
            mention,
            ["event.user", "event.channel", "event.ts", "event.thread_ts", "event", "team_id"],
        ),
        "message": (message, ["event.user", "event.channel", "event.ts", "event.thread_ts"]),
        "home": (home, ["event.user", "event.tab", "event"]),
        "click": (
            click,
            [
                "user.id",
                "user",
                "container.channel_id",
                "container.message_ts",
                "actions.0.value",
                "actions",
                "actions.0",
                "actions.0.action_id",
            ],
        ),
        "submit": (
            submit,
            [
                "state",
                "state.values",
                "state.values.field:tiers",
                "state.values.field:tiers.value",
                "state.values.field:tiers.value.value",
                "actions.0.value",
                "actions.0.block_id",
                "response_url",
            ],
        ),
        "submission": (
            submission,
            ["user.id", "view.private_metadata", "view.state", "view", "view.callback_id"],
        ),
    }


def broken(payload: Any, path: str, value: Any) -> Any:
    """A deep copy of `payload` with the field at `path` replaced by `value` (or removed)."""
    copy = json.loads(json.dumps(payload))
    *parents, last = path.split(".")
    node = copy
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value if value is not MISSING else None
    elif value is MISSING:
        node.pop(last, None)
    else:
        node[last] = value
    return copy


def _form(fields: dict[str, str]) -> bytes:
    return urllib.parse.urlencode(fields).encode()


@st.composite
def bad_requests(draw: st.DrawFn, ids: Ids) -> BadRequest:
    """One bad request: what kind, its body and content type, maybe an odd timestamp."""
    unique = draw(st.integers(1, 999_999))
    kind = draw(
        st.sampled_from(
            [
                "json",
                "form",
                "bytes",
                "nested",
                "command",
                "mention",
                "message",
                "home",
                "click",
                "submit",
                "submission",
            ]
        )
    )
    timestamp = draw(st.none() | st.none() | st.none() | ODD_TIMESTAMPS)
    body: bytes
    content_type = JSON_TYPE
    if kind == "json":
        body = json.dumps(draw(JSON_VALUES)).encode()
    elif kind == "form":
        raw = draw(JSON_VALUES.map(json.dumps) | st.text(max_size=40))
        body, content_type = _form({"payload": raw}), FORM_TYPE
    elif kind == "bytes":
        body = draw(
            st.binary(max_size=200)
            | st.sampled_from([b"{not json", b"[", b"\xff\xfe", b"payload=%7B", b"null", b"1e999"])
        )
        content_type = draw(st.sampled_from([JSON_TYPE, FORM_TYPE, "text/plain"]))
    elif kind == "nested":
        depth = draw(st.integers(50, 5000))
        body = (
            (b"[" * depth + b"]" * depth)
            if draw(st.booleans())
            else (b'{"a":' * depth + b"1" + b"}" * depth)
        )
    elif kind == "command":
        form = {
            "command": "/flotilla",
            "text": "plans",
            "user_id": ids.user,
            "channel_id": ids.channel,
            "team_id": ids.team,
            "api_app_id": ids.app,
            "response_url": "http://127.0.0.1:9/response",
            "trigger_id": "1.2.3",
        }
        field = draw(st.sampled_from(["user_id", "channel_id", "team_id"]))
        value = draw(st.text(alphabet="abcxyz !?", max_size=30) | st.just("U" * 5000) | st.just(""))
        if draw(st.booleans()):
            form.pop(field)
        else:
            form[field] = value
        body, content_type = _form(form), FORM_TYPE
    else:
        payload, paths = templates(ids, unique)[kind]
        wrong: object = draw(WRONG | st.just(MISSING))
        bad = broken(payload, draw(st.sampled_from(paths)), wrong)
        assume(bad != payload)  # removing a field the template lacks is Slack's own payload
        if kind in ("mention", "message", "home"):
            body = json.dumps(bad).encode()
        else:
            body, content_type = _form({"payload": json.dumps(bad)}), FORM_TYPE
    return BadRequest(kind, body, content_type, timestamp)
