"""Events API delivery: signed `event_callback` envelopes POSTed to each subscribed app,
retried with `X-Slack-Retry-Num`/`X-Slack-Retry-Reason` when the app does not answer 200
within the ack timeout, as Slack does.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import re
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from flotilla.local_slack.records import InstalledApp, Json, Message, new_id
from flotilla.local_slack.shapes import message_json
from flotilla.local_slack.state import WorkspaceState

MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
SLACK_RETRY_DELAYS = (0.0, 60.0, 300.0)  # "nearly immediately, 1 minute, 5 minutes"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's v0 request signature: HMAC-SHA256 over `v0:{timestamp}:{body}`."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


@dataclass
class Attempt:
    status: int | None  # None when the app did not answer in time or could not be reached
    retry_num: int
    reason: str | None
    body: str = ""


@dataclass
class Delivery:
    """One event (or interactivity/command request) sent to one app, with every attempt."""

    kind: str
    app_id: str
    event_id: str
    payload: Json
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def acked(self) -> bool:
        return any(a.status == 200 for a in self.attempts)


async def signed_post(
    session: aiohttp.ClientSession,
    app: InstalledApp,
    url: str,
    body: bytes,
    content_type: str,
    timeout: float,
    extra_headers: dict[str, str] | None = None,
) -> Attempt:
    """POST a body signed with the app's signing secret; never raises for network trouble."""
    ts = str(int(time.time()))
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": signature(app.signing_secret, ts, body),
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        **(extra_headers or {}),
    }
    retry_num = int(headers.get("X-Slack-Retry-Num", "0"))
    try:
        async with asyncio.timeout(timeout):
            async with session.post(url, data=body, headers=headers) as resp:
                text = await resp.text()
                reason = None if resp.status == 200 else "http_error"
                return Attempt(resp.status, retry_num, reason, text)
    except TimeoutError:
        return Attempt(None, retry_num, "http_timeout")
    except aiohttp.ClientError:
        return Attempt(None, retry_num, "connection_failed")


class SocketSender(Protocol):
    """Where Socket Mode apps get their envelopes (`socket_mode.SocketHub`)."""

    async def send(
        self,
        app: InstalledApp,
        kind: str,
        payload: Json,
        timeout: float,
        retry_num: int = 0,
        retry_reason: str | None = None,
    ) -> Attempt: ...


class EventDispatcher:
    """Decides which apps get which events and delivers them, with retries."""

    def __init__(
        self,
        state: WorkspaceState,
        *,
        ack_timeout: float = 3.0,
        retry_delays: Sequence[float] = SLACK_RETRY_DELAYS,
    ) -> None:
        self.state = state
        self.ack_timeout = ack_timeout
        self.retry_delays = tuple(retry_delays)
        self.duplicates = 0  # extra identical copies of each event, for fault injection
        self.deliveries: list[Delivery] = []
        self.session: aiohttp.ClientSession | None = None
        self.socket_hub: SocketSender | None = None  # set by the workspace
        self._tasks: set[asyncio.Task[None]] = set()

    # ----- which apps get what -------------------------------------------------------------

    def message_posted(self, msg: Message) -> None:
        channel = self.state.channels[msg.channel]
        mentioned = set(MENTION.findall(msg.text))
        for app in list(self.state.apps.values()):
            if app.bot_user_id not in channel.members:
                continue
            if app.bot_user_id in mentioned and "app_mention" in app.bot_events:
                event = self._message_event(app, msg)
                event["type"] = "app_mention"
                event.pop("channel_type", None)
                self.send(app, event)
            if self._subscribed_to_messages(app, msg.channel):
                self.send(app, self._message_event(app, msg))

    def message_changed(self, msg: Message, previous: Json) -> None:
        for app in self._message_subscribers(msg.channel):
            event = {
                "type": "message",
                "subtype": "message_changed",
                "message": message_json(self.state, msg, include_metadata=_reads_meta(app)),
                "previous_message": previous,
                "channel": msg.channel,
                "hidden": True,
                "ts": self.state.ts_clock.next(),
                "channel_type": self._channel_type(msg.channel),
            }
            event["event_ts"] = event["ts"]
            self.send(app, event)

    def message_deleted(self, msg: Message, previous: Json) -> None:
        for app in self._message_subscribers(msg.channel):
            ts = self.state.ts_clock.next()
            event = {
                "type": "message",
                "subtype": "message_deleted",
                "hidden": True,
                "deleted_ts": msg.ts,
                "channel": msg.channel,
                "previous_message": previous,
                "ts": ts,
                "event_ts": ts,
                "channel_type": self._channel_type(msg.channel),
            }
            self.send(app, event)

    def app_home_opened(self, app: InstalledApp, user_id: str, tab: str = "home") -> None:
        if "app_home_opened" not in app.bot_events:
            return
        dm, _ = self.state.dm(user_id, app.bot_user_id)
        event: Json = {
            "type": "app_home_opened",
            "user": user_id,
            "channel": dm.id,
            "tab": tab,
            "event_ts": self.state.ts_clock.next(),
        }
        view_id = self.state.home_views.get((user_id, app.app_id))
        if view_id is not None:
            event["view"] = self.state.views[view_id].to_json()
        self.send(app, event)

    def _channel_type(self, channel_id: str) -> str:
        channel = self.state.channels[channel_id]
        return "im" if channel.is_im else "group" if channel.is_private else "channel"

    def _subscribed_to_messages(self, app: InstalledApp, channel_id: str) -> bool:
        kind = {"im": "message.im", "group": "message.groups", "channel": "message.channels"}
        return kind[self._channel_type(channel_id)] in app.bot_events

    def _message_subscribers(self, channel_id: str) -> list[InstalledApp]:
        members = self.state.channels[channel_id].members
        return [
            app
            for app in self.state.apps.values()
            if app.bot_user_id in members and self._subscribed_to_messages(app, channel_id)
        ]

    def _message_event(self, app: InstalledApp, msg: Message) -> Json:
        event = message_json(self.state, msg, include_metadata=_reads_meta(app), as_event=True)
        event["channel"] = msg.channel
        event["event_ts"] = msg.ts
        event["channel_type"] = self._channel_type(msg.channel)
        return event

    # ----- delivery ------------------------------------------------------------------------

    def envelope(self, app: InstalledApp, event: Json) -> Json:
        event_id = "Ev" + new_id("")
        context = json.dumps({"id": event_id, "team": self.state.team_id}).encode()
        return {
            "token": app.verification_token,
            "team_id": self.state.team_id,
            "api_app_id": app.app_id,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": int(time.time()),
            "authorizations": [
                {
                    "enterprise_id": None,
                    "team_id": self.state.team_id,
                    "user_id": app.bot_user_id,
                    "is_bot": True,
                    "is_enterprise_install": False,
                }
            ],
            "is_ext_shared_channel": False,
            "event_context": "4-" + base64.urlsafe_b64encode(context).decode().rstrip("="),
        }

    def send(self, app: InstalledApp, event: Json) -> Delivery | None:
        """Queue the delivery of one event to one app (no-op when the app has no URL)."""
        if not app.request_url and not app.socket_mode:
            return None
        delivery = Delivery("event", app.app_id, "", self.envelope(app, event))
        delivery.event_id = delivery.payload["event_id"]
        self.deliveries.append(delivery)
        self.spawn(self._deliver(app, delivery))
        for _ in range(self.duplicates):
            twin = Delivery("event", app.app_id, delivery.event_id, delivery.payload)
            self.deliveries.append(twin)
            self.spawn(self._deliver(app, twin))
        return delivery

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _attempt(
        self, app: InstalledApp, delivery: Delivery, retry: int, reason: str | None
    ) -> Attempt:
        if app.socket_mode:
            assert self.socket_hub is not None, "workspace not started"
            return await self.socket_hub.send(
                app, "events_api", delivery.payload, self.ack_timeout, retry, reason
            )
        assert self.session is not None and app.request_url, "workspace not started"
        headers: dict[str, str] = {}
        if retry:
            headers = {"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": reason or ""}
        body = json.dumps(delivery.payload).encode()
        return await signed_post(
            self.session, app, app.request_url, body, "application/json", self.ack_timeout, headers
        )

    async def _deliver(self, app: InstalledApp, delivery: Delivery) -> None:
        reason: str | None = None
        for retry in range(len(self.retry_delays) + 1):
            attempt = await self._attempt(app, delivery, retry, reason)
            delivery.attempts.append(attempt)
            self.state.changed()
            if attempt.status == 200 or retry == len(self.retry_delays):
                return
            await asyncio.sleep(self.retry_delays[retry])
            reason = attempt.reason or "unknown_error"

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _reads_meta(app: InstalledApp) -> bool:
    return "metadata.message:read" in app.scopes
