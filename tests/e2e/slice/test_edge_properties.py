"""Generated bad input at the edge (hypothesis): random JSON values and recorded payloads with
one field broken, each sent unsigned (401, no traceback) and signed (never a 500); nothing
from them is stored or posted. One stack serves every example."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flotilla.bot.views.forms import MODAL_CALLBACK
from flotilla.bot.views.plan_card import CANCEL_ACTION
from flotilla.local_slack.interactivity import interactivity_of
from tests.e2e.slice.conftest import Run
from tests.e2e.slice.test_bad_input import mention_body, post, signed
from tests.e2e.slice.test_edge_validation import (
    FORM,
    form_post,
    headers_for,
    stored_rows,
    tracebacks,
)

LEAF = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
JSON_VALUES = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
# values no field Flotilla reads accepts where they are put (never None: thread_ts may be)
WRONG = (
    st.booleans()
    | st.integers()
    | st.floats()
    | st.lists(JSON_VALUES, max_size=3)
    | st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=3)
    | st.text(alphabet="abcxyz !?<>{}", max_size=30)
    | st.just("Z" * 5000)
)


def templates(run: Run) -> dict[str, tuple[Any, list[str]]]:
    """Recorded payloads (as the local workspace sends them) and the fields to break."""
    ws, app, maya = run.driver.ws, run.stack.commander, run.driver.person("maya")
    channel = run.stack.channel.id
    click = {
        "type": "block_actions",
        "user": {"id": maya.id},
        "team": {"id": ws.state.team_id},
        "api_app_id": app.app_id,
        "trigger_id": "1.2.3",
        "container": {
            "type": "message",
            "message_ts": "1700000000.000200",
            "channel_id": channel,
            "thread_ts": "1700000000.000100",
        },
        "response_url": interactivity_of(ws).response_url(app, channel, maya.id),
        "actions": [
            {"type": "button", "action_id": CANCEL_ACTION, "value": "1", "action_ts": "1.0"}
        ],
    }
    metadata = {"key": "form:1:1:1:1", "channel": channel, "thread_ts": "1700000000.000100"}
    submission = {
        "type": "view_submission",
        "user": {"id": maya.id},
        "team": {"id": ws.state.team_id},
        "view": {
            "id": "V1",
            "type": "modal",
            "callback_id": MODAL_CALLBACK,
            "state": {"values": {}},
            "private_metadata": json.dumps(metadata),
        },
    }
    return {
        "mention": (
            json.loads(mention_body(run, "hello")),
            ["event.user", "event.channel", "event.ts", "event.thread_ts", "event"],
        ),
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
            ],
        ),
        "submission": (submission, ["user.id", "view.private_metadata", "view.state", "view"]),
    }


def broken(payload: Any, path: str, value: Any) -> Any:
    """A deep copy of `payload` with the field at `path` replaced by `value`."""
    copy = json.loads(json.dumps(payload))
    *parents, last = path.split(".")
    node = copy
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return copy


@st.composite
def bad_requests(draw: st.DrawFn, run: Run) -> tuple[str, str]:
    """(body, content type): random JSON values, or a recorded payload with one field broken."""
    kind = draw(st.sampled_from(["json", "form", "mutated", "command"]))
    if kind == "json":
        return json.dumps(draw(JSON_VALUES)), "application/json"
    if kind == "form":
        return urllib.parse.urlencode({"payload": json.dumps(draw(JSON_VALUES))}), FORM
    if kind == "command":
        form = {
            "command": "/flotilla",
            "text": "plans",
            "user_id": run.driver.person("maya").id,
            "channel_id": run.stack.channel.id,
            "response_url": "http://127.0.0.1:1/r",
        }
        field = draw(st.sampled_from(["user_id", "channel_id"]))
        form[field] = draw(st.text(alphabet="abcxyz !?", max_size=30) | st.just("U" * 5000))
        return urllib.parse.urlencode(form), FORM
    name = draw(st.sampled_from(sorted(templates(run))))
    payload, paths = templates(run)[name]
    bad = broken(payload, draw(st.sampled_from(paths)), draw(WRONG))
    if name == "mention":
        return json.dumps(bad), "application/json"
    return form_post(bad), FORM


async def test_generated_bad_input_never_gets_a_500_nor_stores_anything(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with start() as run:
        url = run.stack.commander.request_url or ""
        loop = asyncio.get_running_loop()
        statuses: list[int] = []

        def send(body: str, headers: dict[str, str]) -> int:
            status, _ = asyncio.run_coroutine_threadsafe(post(url, body, headers), loop).result(30)
            statuses.append(status)
            return status

        @settings(
            max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(request=bad_requests(run), forged=st.booleans())
        def no_500_no_traceback(request: tuple[str, str], forged: bool) -> None:
            body, ctype = request
            seen = len(caplog.records)
            unsigned = {"Content-Type": ctype} | (
                signed("not-the-secret", body, int(time.time())) if forged else {}
            )
            assert send(body, unsigned | {"Content-Type": ctype}) == 401
            assert not [r for r in caplog.records[seen:] if r.exc_info]
            assert send(body, headers_for(run, body, ctype)) != 500, body[:300]

        await asyncio.to_thread(no_500_no_traceback)
        await run.quiesce()
        assert await stored_rows(run) == 0
        assert not any(run.stack.workspace.state.messages.values())
        assert not tracebacks(caplog)
        assert 500 not in statuses and len(statuses) >= 200
