"""Benchmark: the ack latency the durable inbox adds (the store before Slack's ack).

Two copies of Flotilla's real Bolt app serve one local stack (the local Slack workspace,
one service, one database) on two ports:

- **inbox**: as shipped – a mention is recorded, and a click stored in the inbox, before
  the HTTP response (`bot/listeners/messages.py`, `bot/listeners/inbox.py`);
- **ack first**: the baseline – the same app with those two middlewares replaced by one
  that acks at once and stores in the background (what the edge did before the inbox).

Signed requests go straight to each app over loopback HTTP, interleaved (inbox, baseline,
baseline, inbox, …) so both see the same machine load, and the HTTP response time is
measured at the client: median and p95 per kind (events: `app_mention`; interactions: a
Cancel click) and backend (a SQLite file; PostgreSQL in a throw-away server of its own
when `initdb` is installed).

With `--idle` the executor is stopped first: the mentions' commander turns do not run, so
the figures are the edge's own cost without the background work competing for the database
and the CPU.

Usage: .venv/bin/python bench/ack.py [--requests N] [--idle] [--only sqlite|postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import statistics
import sys
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from slack_bolt.async_app import AsyncApp

from flotilla.agents.reconciling.inbox import finish_inbound, store_inbound
from flotilla.bot import handlers
from flotilla.bot.app import build_app
from flotilla.bot.http import web_app
from flotilla.bot.listeners.inbox import inbox_key
from flotilla.bot.local import LocalStack, start_local_stack
from flotilla.bot.views.plan_card import CANCEL_ACTION

PRE_ACK = {"record_before_ack", "store_before_ack"}


def ack_first_app(stack: LocalStack) -> AsyncApp:
    """The baseline: Flotilla's app whose stores happen after the ack, in the background."""
    service = stack.service
    app = build_app(service, signing_secret=stack.commander.signing_secret)
    app._async_middleware_list = [  # the two pre-ack stores go
        m
        for m in app._async_middleware_list
        if getattr(getattr(m, "func", None), "__name__", "") not in PRE_ACK
    ]

    @app.middleware
    async def store_after_ack(body: dict[str, Any], next: Callable[[], Awaitable[None]]) -> None:
        event = body.get("event") or {}
        if event.get("type") == "app_mention":
            service.events.start(lambda: handlers.on_mention(service, event, body["event_id"]))
        elif (found := inbox_key(body)) is not None:
            kind, key = found

            async def store() -> None:  # stored as handled: the baseline replays nothing
                stored = await store_inbound(
                    service.db,
                    service.clock(),
                    key=key,
                    kind=kind,
                    body=body,
                    claim=timedelta(seconds=60),
                )
                if stored is not None:
                    await finish_inbound(service.db, stored, service.clock())

            service.events.start(store)
        await next()

    return app


async def serve(app: AsyncApp, stack: LocalStack) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(web_app(app, stack.service), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"


def signed(secret: str, body: str, content_type: str) -> dict[str, str]:
    ts = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"v0:{ts}:{body}".encode(), hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={digest}",
        "Content-Type": content_type,
    }


class Requests:
    """Slack-shaped, signed request bodies for the stack's workspace, each one new."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.n = 0
        ws = stack.workspace
        self.team = ws.state.team_id
        self.channel = stack.channel.id
        self.maya = stack.people["maya"].id
        self.bot = stack.commander.bot_user_id

    def ts(self) -> str:
        self.n += 1
        return f"{int(time.time())}.{self.n:06d}"

    def mention(self) -> tuple[str, str]:
        ts = self.ts()
        event = {
            "type": "app_mention",
            "user": self.maya,
            "ts": ts,
            "event_ts": ts,
            "channel": self.channel,
            "text": f"<@{self.bot}> what time is it? ({ts})",
        }
        body = {
            "type": "event_callback",
            "team_id": self.team,
            "api_app_id": self.stack.commander.app_id,
            "event_id": f"Ev{uuid.uuid4().hex[:10]}",
            "event_time": int(time.time()),
            "event": event,
        }
        return json.dumps(body), "application/json"

    def click(self) -> tuple[str, str]:
        ts = self.ts()
        ws, app = self.stack.workspace, self.stack.commander
        payload = {
            "type": "block_actions",
            "user": {"id": self.maya},
            "team": {"id": self.team},
            "api_app_id": app.app_id,
            "trigger_id": f"{ts}.{uuid.uuid4().hex[:8]}",
            "response_url": ws.interactivity.response_url(app, self.channel, self.maya),
            "container": {
                "type": "message",
                "message_ts": ts,
                "channel_id": self.channel,
                "thread_ts": ts,
            },
            "actions": [
                {"type": "button", "action_id": CANCEL_ACTION, "value": "999999", "action_ts": ts}
            ],
        }
        return urllib.parse.urlencode({"payload": json.dumps(payload)}), (
            "application/x-www-form-urlencoded"
        )


async def measure(stack: LocalStack, requests: int) -> dict[tuple[str, str], list[float]]:
    """Response times (ms) by (kind, arm), interleaved."""
    secret = stack.commander.signing_secret
    inbox_runner, inbox_url = await serve(build_app(stack.service, signing_secret=secret), stack)
    base_runner, base_url = await serve(ack_first_app(stack), stack)
    made = Requests(stack)
    times: dict[tuple[str, str], list[float]] = {}
    try:
        async with aiohttp.ClientSession() as session:
            for i in range(requests):
                arms = [("inbox", inbox_url), ("ack first", base_url)]
                if i % 2:
                    arms.reverse()
                for kind, make in (("event", made.mention), ("interaction", made.click)):
                    for arm, url in arms:
                        body, ctype = make()
                        began = time.perf_counter()
                        headers = signed(secret, body, ctype)
                        async with session.post(url, data=body, headers=headers) as answer:
                            await answer.read()
                            assert answer.status == 200, (arm, kind, answer.status)
                        spent = (time.perf_counter() - began) * 1000
                        times.setdefault((kind, arm), []).append(spent)
        await stack.service.settle()
    finally:
        await inbox_runner.cleanup()
        await base_runner.cleanup()
    return times


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def report(backend: str, times: dict[tuple[str, str], list[float]]) -> None:
    print(f"{backend}:")
    print(f"  {'kind':<12} {'arm':<10} {'n':>4} {'median ms':>10} {'p95 ms':>8}")
    for kind in ("event", "interaction"):
        medians = {}
        for arm in ("ack first", "inbox"):
            values = times[(kind, arm)]
            medians[arm] = statistics.median(values)
            print(
                f"  {kind:<12} {arm:<10} {len(values):>4} {medians[arm]:>10.1f} {p95(values):>8.1f}"
            )
        added = medians["inbox"] - medians["ack first"]
        print(f"  {kind:<12} {'added':<10} {'':>4} {added:>+10.1f}")


async def one_backend(backend: str, url: str, requests: int, idle: bool) -> None:
    stack = await start_local_stack(url)
    try:
        await stack.service.settle()
        if idle:
            await stack.service.executor.stop(0)
        report(backend + (" (executor stopped)" if idle else ""), await measure(stack, requests))
    finally:
        await stack.stop()


async def main(requests: int, idle: bool, only: str | None) -> None:
    print(f"ack latency at the client, {requests} requests per kind and arm, interleaved")
    if only in (None, "sqlite"):
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite+aiosqlite:///{Path(folder) / 'ack.db'}"
            await one_backend("SQLite", url, requests, idle)
    if only not in (None, "postgresql"):
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's tests/
    from tests.throwaway_postgres import ThrowawayPostgres  # its own server, never a shared one

    server = ThrowawayPostgres()
    try:
        await server.start()
        await one_backend("PostgreSQL", server.url, requests, idle)
    finally:
        server.remove()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--idle", action="store_true", help="stop the executor first")
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    args = parser.parse_args()
    asyncio.run(main(args.requests, args.idle, args.only))
