"""The durable inbox at the Slack edge: every block action, view submission, slash command
and Home opening Flotilla acts on is stored (`agents/reconciling/inbox.py`, de-duplicated by Slack's
ids) by a global middleware *before* Bolt acks it, in HTTP and in Socket Mode alike (both
send the ack only after the middleware ran).

- Stored: the listener runs; when it is done (or answered with a sentence, see
  `guard.py`) the row is marked processed. A row cut short by a crash is replayed from its
  stored body by `replay` (the service's recovery pass), through the same listeners.
- Stored already (a redelivery of the same request): acked, nothing is done twice.
- Not stored (the database is away): an event gets HTTP 500, so Slack sends it again; the
  person who clicked, submitted or typed the command reads "Something went wrong on my
  side – please try again." The operator gets the traceback in the log.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse

from flotilla.agents.core.failures import is_storage_error, storage_error
from flotilla.agents.reconciling.inbox import InboxFinish, claim_cut_short, store_inbound
from flotilla.bot.listeners.guard import INBOX_DONE, TRY_AGAIN, sentence_view
from flotilla.bot.listeners.inbound import (
    BlockActions,
    InvalidPayload,
    SlashCommand,
    ViewSubmission,
    parse,
)
from flotilla.bot.views.admin import ADD_AGENT_ACTION, AGENT_CALLBACK
from flotilla.bot.views.forms import INLINE_ACTION, MODAL_CALLBACK, OPEN_ACTION, SUBMIT_ACTION
from flotilla.bot.views.plan_card import CANCEL_ACTION

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService

log = logging.getLogger(__name__)
Body = dict[str, Any]
ACTIONS = frozenset({CANCEL_ACTION, INLINE_ACTION, SUBMIT_ACTION, OPEN_ACTION, ADD_AGENT_ACTION})
CALLBACKS = frozenset({MODAL_CALLBACK, AGENT_CALLBACK})
COMMANDS = frozenset({"/flotilla"})
REPLAYED = "flotilla_inbox_replayed"  # context key: the row a replayed request comes from


def inbox_key(body: Body) -> tuple[str, str] | None:
    """(kind, de-duplication key) of a request Flotilla acts on; None for anything else,
    and for a payload that does not fit its typed model (never stored: its listener refuses
    it with a sentence). Slack gives every click, submission and command its own
    `trigger_id`; a digest of the body keeps two different requests that claim the same id
    apart, while a redelivery (the same body) is the same key."""
    try:
        found = _key(body)
    except InvalidPayload:
        return None
    if found is None:
        return None
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()
    return found[0], f"{found[1][:250]}:{digest[:16]}"  # within the column's 300


def _key(body: Body) -> tuple[str, str] | None:
    kind = body.get("type")
    if kind == "block_actions":
        actions = body.get("actions") or [{}]
        if actions[0].get("action_id") not in ACTIONS:
            return None
        parse(BlockActions, body, "a click")
        user = (body.get("user") or {}).get("id", "")
        fallback = f"{user}:{actions[0].get('action_ts')}"
        return kind, f"action:{body.get('trigger_id') or fallback}"
    if kind == "view_submission":
        view = body.get("view") or {}
        if view.get("callback_id") not in CALLBACKS:
            return None
        parse(ViewSubmission, body, "a submission")
        fallback = f"{view.get('id')}:{view.get('hash')}"
        return kind, f"view:{body.get('trigger_id') or fallback}"
    if "command" in body:
        if body.get("command") not in COMMANDS or not body.get("trigger_id"):
            return None
        parse(SlashCommand, body, "a command")
        return "command", f"command:{body['trigger_id']}"
    event = body.get("event") if kind == "event_callback" else None
    if isinstance(event, dict) and event.get("type") == "app_home_opened" and body.get("event_id"):
        return "app_home_opened", f"event:{body['event_id']}"
    return None


def register_inbox(app: AsyncApp, service: SlackService) -> None:
    """The middleware that stores a request before its ack (see the module)."""

    @app.middleware
    async def store_before_ack(
        body: Body, context: AsyncBoltContext, next: Callable[[], Awaitable[None]]
    ) -> BoltResponse | None:
        replayed = context.get(REPLAYED)
        found = None if replayed is not None else inbox_key(body)
        if replayed is not None:
            context[INBOX_DONE] = _finisher(service, int(replayed))
        elif found is not None:
            kind, key = found
            try:
                stored = await store_inbound(
                    service.db,
                    service.clock(),
                    key=key,
                    kind=kind,
                    body=body,
                    claim=timedelta(seconds=service.options.inbox_claim_seconds),
                )
            except Exception as exc:
                if not is_storage_error(exc):
                    log.exception("could not store a %s before its ack (%s)", kind, key)
                else:  # an outage: one line, not a traceback per delivery
                    log.warning(
                        "could not store a %s before its ack (%s): %s",
                        kind,
                        key,
                        storage_error(exc),
                    )
                return _not_stored(service, kind, context)
            if stored is None:
                log.info("a %s was delivered again (%s); it is handled once", kind, key)
                return BoltResponse(status=200, body="")
            context[INBOX_DONE] = _finisher(service, stored)
        await next()
        return None


def _finisher(service: SlackService, inbox_id: int) -> InboxFinish:
    return InboxFinish(service.db, inbox_id, service.clock)


def _not_stored(service: SlackService, kind: str, context: AsyncBoltContext) -> BoltResponse:
    """The answer to a request that could not be stored: Slack retries an event; a person
    is asked to try again (in the ack, or through the response_url for a click)."""
    if kind == "app_home_opened":
        return BoltResponse(status=500, body={"error": "not stored, please retry"})
    if kind == "command":
        return BoltResponse(status=200, body={"response_type": "ephemeral", "text": TRY_AGAIN})
    if kind == "view_submission":
        view = sentence_view(TRY_AGAIN)
        return BoltResponse(status=200, body={"response_action": "update", "view": view})
    respond = context.respond
    if respond is not None:

        async def say() -> None:
            await respond(text=TRY_AGAIN, response_type="ephemeral", replace_original=False)

        service.events.start(say)
    return BoltResponse(status=200, body="")


async def replay(app: AsyncApp, service: SlackService) -> int:
    """One recovery pass: requests stored but cut short (their claim ran out unprocessed)
    go through the listeners again from their stored bodies. How many were replayed."""
    claim = timedelta(seconds=service.options.inbox_claim_seconds)
    rows = await claim_cut_short(service.db, service.clock(), claim)
    for row in rows:
        log.warning("replaying a %s cut short (%s, try %d)", row.kind, row.key, row.attempts)
        # Socket Mode's request kind: Slack's signature was checked when it first came
        request = AsyncBoltRequest(body=row.body, mode="socket_mode", context={REPLAYED: row.id})
        response = await app.async_dispatch(request)
        if response.status >= 400:  # no listener took it: nothing more to do with it
            await _finisher(service, row.id)()
    return len(rows)
