"""Validation at the edge: what is not Slack's, or not the shape Slack sends, is refused with
a status (401/400, never 500), one log line and nothing stored or sent; interactions that
fail after the ack are answered with a sentence; concurrent duplicate clicks get one result
and a sentence for the other."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from flotilla.agents.core.failures import PUBLIC_STORAGE
from flotilla.bot.views.admin import AGENT_CALLBACK
from flotilla.bot.views.forms import INLINE_ACTION, MODAL_CALLBACK, OPEN_ACTION, SUBMIT_ACTION
from flotilla.bot.views.plan_card import CANCEL_ACTION
from tests.e2e.slice.conftest import REQUEST, Run, scripted
from tests.e2e.slice.scripts import plans
from tests.e2e.slice.test_bad_input import mention_body, post, signed

TRY_AGAIN = "Something went wrong on my side – please try again."
NESTED = "[" * 100_000 + "]" * 100_000


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info or r.stack_info]


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name.startswith("flotilla.bot.") and "refused" in r.message
    ]


async def stored_rows(run: Run) -> int:
    async with run.service.db.read() as conn:
        found = 0
        for table in ("conversations", "thread_messages", "outbox"):
            found += (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
        return found


def form_post(payload: Any) -> str:
    return urllib.parse.urlencode({"payload": json.dumps(payload)})


def headers_for(run: Run, body: str, ctype: str = "application/json") -> dict[str, str]:
    headers = signed(run.stack.commander.signing_secret, body, int(time.time()))
    headers["Content-Type"] = ctype
    return headers


FORM = "application/x-www-form-urlencoded"


async def test_bodies_that_are_not_slack_requests_get_400_or_401_never_500(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with start() as run:
        url = run.stack.commander.request_url or ""
        secret = run.stack.commander.signing_secret
        bodies = ["[]", "null", "42", '"text"', NESTED, '{"a": ' * 5000 + "1" + "}" * 5000]
        for body in bodies:  # signed: unparsable is 400
            status, answer = await post(url, body, headers_for(run, body))
            assert status == 400, (body[:20], status, answer)
        for body in ("payload=[]", "payload=null", "payload=%7Bnot", "payload=" + NESTED):
            status, answer = await post(url, body, headers_for(run, body, FORM))
            assert status == 400, (body[:20], status, answer)
        good = mention_body(run, "hello")
        nan = signed(secret, good, int(time.time())) | {"X-Slack-Request-Timestamp": "nan"}
        for headers in (nan, nan | {"X-Slack-Signature": "v0=nan"}):
            status, _ = await post(url, good, headers)
            assert status == 400
        for body in bodies + ["payload=[]"]:  # unsigned or badly signed: 401
            for headers in (
                {"Content-Type": "application/json"},
                signed("not-the-secret", body, int(time.time())),
            ):
                status, _ = await post(url, body, headers)
                assert status == 401, (body[:20], status)
        assert not tracebacks(caplog)
        assert len(refusals(caplog)) == 1  # one line per source address per minute
        assert await stored_rows(run) == 0
        root = run.ask("what time zone is the launch in?")  # still working afterwards
        await run.says(root, "[offline model]", from_="Flotilla")


def mention(run: Run, **event: Any) -> str:
    body = json.loads(mention_body(run, "compare our pricing and draft a note"))
    body["event"].update(event)
    return json.dumps(body)


async def test_malformed_events_are_refused_and_nothing_is_stored_or_sent(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with start() as run:
        url = run.stack.commander.request_url or ""
        bodies = [
            mention(run, user="U" + "X" * 5000),
            mention(run, thread_ts="1" * 5000),
            mention(run, channel=""),
            mention(run, ts="yesterday"),
            mention(run, text=["not", "text"]),
            mention(run, text="x" * 50_000),
            mention(run, metadata={"event_type": "flotilla_result", "event_payload": "x" * 9000}),
        ]
        home = json.loads(mention_body(run, ""))
        home["event"] = {"type": "app_home_opened", "tab": "home", "event_ts": "1.2"}
        bodies.append(json.dumps(home))
        maya = run.driver.person("maya").id
        for tab in ({}, {"tab": "nan"}, {"tab": ""}):  # Slack always says: home or messages
            home["event"] = {"type": "app_home_opened", "user": maya, "event_ts": "1.2"} | tab
            bodies.append(json.dumps(home))
        for body in bodies:
            status, answer = await post(url, body, headers_for(run, body))
            assert status == 400, (body[:200], status, answer)
        await run.quiesce()
        assert await stored_rows(run) == 0
        state = run.stack.workspace.state
        assert not any(state.messages.values()) and not state.home_views
        assert not tracebacks(caplog)
        assert len(refusals(caplog)) == len(bodies)  # signed: each refusal is said once


async def test_signed_but_malformed_interactions_are_answered_with_a_sentence(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with start() as run:
        root = run.ask("[ask] research the history of our launch emails and write a short report")
        question = await run.says(root, "asks:")
        await run.quiesce()
        before = await stored_rows(run)
        url = run.stack.commander.request_url or ""
        ws, app, maya = run.driver.ws, run.stack.commander, run.driver.person("maya")

        def action(action_id: str, **fields: Any) -> dict[str, Any]:
            return {
                "type": "block_actions",
                "user": {"id": maya.id},
                "team": {"id": ws.state.team_id},
                "api_app_id": app.app_id,
                "container": {
                    "type": "message",
                    "message_ts": question.ts,
                    "channel_id": question.channel,
                    "thread_ts": root.ts,
                },
                "trigger_id": "1.2.3",
                "response_url": ws.interactivity.response_url(app, question.channel, maya.id),
                "actions": [
                    {"type": "button", "action_id": action_id, "action_ts": "1.0"} | fields
                ],
            }

        clicks = [
            action(INLINE_ACTION, block_id="junk", value="an answer"),
            action(OPEN_ACTION, value="form:x:y"),
            action(SUBMIT_ACTION, value="form:x:y"),
            action(SUBMIT_ACTION, value="form:1:1:1:1") | {"state": {"values": "junk"}},
            action(CANCEL_ACTION, value="not a plan"),
            action(CANCEL_ACTION, value="9" * 3000),
        ]
        for payload in clicks:
            body = form_post(payload)
            status, answer = await post(url, body, headers_for(run, body, FORM))
            assert status == 200, (payload["actions"], status, answer)
        await run.driver.wait_for(
            lambda: len(run.driver.ephemerals("maya")) == len(clicks), what="a sentence each"
        )
        assert all(e.text.endswith(".") for e in run.driver.ephemerals("maya"))

        view = {"id": "V1", "type": "modal", "callback_id": MODAL_CALLBACK, "state": {"values": {}}}
        for metadata in ("not json", json.dumps({"key": "junk"}), "[]", "x" * 3001):
            submission = {
                "type": "view_submission",
                "user": {"id": maya.id},
                "team": {"id": ws.state.team_id},
                "api_app_id": app.app_id,
                "view": view | {"private_metadata": metadata},
            }
            body = form_post(submission)
            status, answer = await post(url, body, headers_for(run, body, FORM))
            assert status == 200 and "went wrong" not in answer, (metadata, answer)
            assert json.loads(answer)["response_action"] == "update", answer
        agent_view = view | {"callback_id": AGENT_CALLBACK, "private_metadata": "{"}
        body = form_post({"type": "view_submission", "user": {"id": ""}, "view": agent_view})
        status, answer = await post(url, body, headers_for(run, body, FORM))
        assert status == 200 and json.loads(answer)["response_action"] == "update"

        command = {
            "command": "/flotilla",
            "text": "plans",
            "team_id": ws.state.team_id,
            "channel_id": question.channel,
            "api_app_id": app.app_id,
            "response_url": ws.interactivity.response_url(app, question.channel, maya.id),
            "trigger_id": "1.2.3",
        }
        body = urllib.parse.urlencode(command)  # no user_id
        status, answer = await post(url, body, headers_for(run, body, FORM))
        assert status == 200 and answer.strip(), answer
        await run.quiesce()
        assert not tracebacks(caplog)
        assert await stored_rows(run) == before
        plan = await run.plan(root)
        assert plan.status in ("running", "paused") and plan.steps[0].question is not None
        assert plan.steps[0].question.answer is None  # the real form still answers:
        await run.driver.click("maya", question, INLINE_ACTION, value="2024 only")
        await run.says(root, "Answered by")


async def test_a_listener_failing_after_the_ack_answers_with_a_sentence(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with start() as run:
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        card = next(m for m in run.messages(root) if "Plan (" in m.text)

        async def broken(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError("the reconciler is broken")

        run.service.reconciler.reconcile = broken
        delivery = await run.driver.click("maya", card, CANCEL_ACTION)
        assert [a.status for a in delivery.attempts] == [200]
        await run.driver.wait_for(lambda: run.driver.ephemerals("maya"), what="a sentence")
        assert run.driver.ephemerals("maya")[0].text == TRY_AGAIN
        failures = tracebacks(caplog)
        assert len(failures) == 1 and "reconciler is broken" in str(failures[0].exc_info)


async def test_a_listener_meeting_a_database_outage_says_the_storage_sentence(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with start() as run:
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        card = next(m for m in run.messages(root) if "Plan (" in m.text)

        async def away(*_args: Any, **_kwargs: Any) -> Any:
            refused = ConnectionRefusedError(111, "Connect call failed")
            raise OperationalError("SELECT 1", {}, refused)

        run.service.reconciler.reconcile = away
        delivery = await run.driver.click("maya", card, CANCEL_ACTION)
        assert [a.status for a in delivery.attempts] == [200]
        await run.driver.wait_for(lambda: run.driver.ephemerals("maya"), what="a sentence")
        assert run.driver.ephemerals("maya")[0].text == PUBLIC_STORAGE
        assert not tracebacks(caplog)
        assert any("database is unreachable" in r.message for r in caplog.records)


async def test_two_cancel_clicks_at_once_cancel_once_and_answer_the_other(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with start() as run:
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        card = next(m for m in run.messages(root) if "Plan (" in m.text)
        deliveries = await asyncio.gather(
            run.driver.click("maya", card, CANCEL_ACTION),
            run.driver.click("maya", card, CANCEL_ACTION),
        )
        assert [a.status for d in deliveries for a in d.attempts] == [200, 200]
        await run.says(root, "Plan cancelled by")
        await run.driver.wait_for(lambda: run.driver.ephemerals("maya"), what="a sentence")
        await run.quiesce()
        assert [e.text for e in run.driver.ephemerals("maya")] == [
            "This plan is already cancelled."
        ]
        assert (await run.plan(root)).status == "cancelled"
        assert run.transcript(root).count("Plan cancelled by") == 1
        assert not tracebacks(caplog)


async def test_two_answers_to_one_form_at_once_record_one(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with start() as run:
        root = run.ask("[ask] research the history of our launch emails and write a short report")
        question = await run.says(root, "asks:")
        await asyncio.gather(
            run.driver.click("maya", question, INLINE_ACTION, value="2024 only"),
            run.driver.click("maya", question, INLINE_ACTION, value="2023 too"),
        )
        await run.says(root, "Answered by")
        await run.driver.wait_for(lambda: run.driver.ephemerals("maya"), what="a sentence")
        await run.quiesce()
        [told] = run.driver.ephemerals("maya")
        assert "already answered" in told.text
        plan = await run.plan(root)
        assert plan.steps[0].question is not None
        assert plan.steps[0].question.answer in ({"answer": "2024 only"}, {"answer": "2023 too"})
        assert not tracebacks(caplog)


async def test_two_submits_of_one_form_modal_at_once_record_one_and_refuse_none(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    # 6 fields: more than a message holds, so a modal
    form = {
        "fields": [{"name": "budget", "label": "Budget"}, {"name": "owner", "label": "Owner"}]
        + [{"name": f"extra{i}", "label": f"Extra {i}", "required": False} for i in range(4)]
    }
    steps = [
        {"index": 1, "title": "Budget and owner", "assignee": "user", "form": form},
        {"index": 2, "title": "Write", "assignee": "writer", "input": "Plan it"},
    ]
    async with start(model=scripted(plans({"BUDGET": steps}))) as run:
        root = run.ask("BUDGET please")
        await run.driver.click("maya", await run.says(root, "needs your input"), OPEN_ACTION)
        await run.modal("maya")
        view = run.driver.fill("maya", {"field:budget": "10k", "field:owner": "Dev"})
        maya, submit = run.driver.person("maya"), run.driver.ws.interactivity.view_submission
        await asyncio.gather(*(submit(maya, run.stack.commander, view) for _ in range(2)))
        await run.says(root, "Answered by")
        await run.quiesce()
        assert run.driver.ephemerals("maya") == []  # the same answer twice: nothing to refuse
        step = (await run.plan(root)).steps[0]
        assert step.status == "done" and "10k" in (step.output_summary or "")
        assert not tracebacks(caplog)


async def test_an_unknown_action_and_an_unreachable_response_url_get_no_404_and_no_traceback(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Found by the chaos suite (bench/chaos, experiment 5): a click on an action Flotilla
    does not know got Bolt's unhandled-request 404 (an empty action_id is not Slack's shape:
    400), and a slash command whose response_url cannot be reached logged a traceback."""
    caplog.set_level(logging.INFO)
    async with start() as run:
        url = run.stack.commander.request_url or ""
        ws, app, maya = run.driver.ws, run.stack.commander, run.driver.person("maya")
        channel = next(iter(ws.state.channels))
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            closed = f"http://127.0.0.1:{probe.getsockname()[1]}/response"

        def click(action_id: str) -> str:
            return form_post(
                {
                    "type": "block_actions",
                    "user": {"id": maya.id},
                    "team": {"id": ws.state.team_id},
                    "api_app_id": app.app_id,
                    "trigger_id": "1.2.3",
                    "response_url": closed,
                    "container": {
                        "type": "message",
                        "message_ts": "1700000000.000002",
                        "channel_id": channel,
                        "thread_ts": "1700000000.000001",
                    },
                    "actions": [
                        {"type": "button", "action_id": action_id, "value": "1", "action_ts": "1.0"}
                    ],
                }
            )

        for action_id, expected in (("", 400), ("x" * 256, 400), ("not_flotillas", 200)):
            body = click(action_id)
            status, answer = await post(url, body, headers_for(run, body, FORM))
            assert status == expected, (action_id[:10], status, answer)
        view = {"id": "V1", "type": "modal", "callback_id": "not_flotillas", "state": {}}
        body = form_post({"type": "view_submission", "user": {"id": maya.id}, "view": view})
        status, answer = await post(url, body, headers_for(run, body, FORM))
        assert status == 200, answer  # a view Flotilla did not open: acked, nothing done
        command = {
            "command": "/flotilla",
            "text": "plans",
            "user_id": maya.id,
            "team_id": ws.state.team_id,
            "channel_id": channel,
            "api_app_id": app.app_id,
            "response_url": closed,
            "trigger_id": "1.2.4",
        }
        body = urllib.parse.urlencode(command)
        warned = Heard("could not reach Slack")
        guard_log = logging.getLogger("flotilla.bot.listeners.guard")
        guard_log.addHandler(warned)
        try:
            status, _ = await post(url, body, headers_for(run, body, FORM))
            assert status == 200
            async with asyncio.timeout(30):  # the answer is sent after the ack
                await warned.event.wait()
        finally:
            guard_log.removeHandler(warned)
        await run.quiesce()
        assert not tracebacks(caplog)
        assert await stored_rows(run) == 0


class Heard(logging.Handler):
    """Sets `event` when a record containing `words` is logged."""

    def __init__(self, words: str) -> None:
        super().__init__(logging.INFO)
        self.words, self.event = words, asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.event.set()
