"""Flotilla's HTTP surface: Slack's requests, liveness, readiness and metrics.

- `POST /slack/events` – signed requests from Slack (HTTP mode only), handed to Bolt.
- `GET /healthz` – liveness: the process serves requests (no dependency is checked).
- `GET /readyz` – readiness: the database answers a query; 503 with the reason otherwise.
- `GET /metrics` – Prometheus exposition (the outbox backlog is read at scrape time).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from slack_bolt.async_app import AsyncApp
from sqlalchemy import text

if TYPE_CHECKING:
    from bot.service import Flotilla

log = logging.getLogger(__name__)
READY_TIMEOUT_S = 5.0
_KINDS = {"event_callback": "event", "url_verification": "event", "block_actions": "interaction"}


def request_kind(body: dict[str, Any]) -> str:
    """`event`, `interaction` or `command`, for the request-latency metric."""
    if "command" in body:
        return "command"
    return _KINDS.get(str(body.get("type", "")), "interaction")


def measure_requests(app: AsyncApp, service: Flotilla) -> None:
    """Time every request from Slack until Bolt acknowledged it (both modes)."""

    async def timed(body: dict[str, Any], next: Callable[[], Awaitable[Any]]) -> Any:  # noqa: A002
        started = time.perf_counter()
        try:
            return await next()
        finally:
            service.metrics.request_seconds.labels(request_kind(body)).observe(
                time.perf_counter() - started
            )

    app.middleware(timed)


async def database_ready(service: Flotilla) -> str | None:
    """None when the database answers, else a sentence saying what is wrong."""
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            async with service.db.read() as conn:
                await conn.execute(text("SELECT 1"))
    except TimeoutError:
        return f"the database did not answer within {READY_TIMEOUT_S:g} seconds"
    except Exception as exc:  # any driver error means "not ready"; the reason is logged
        log.warning("readiness check: the database is not reachable: %s", exc)
        return f"the database is not reachable ({type(exc).__name__})"
    return None


def web_app(app: AsyncApp, service: Flotilla, *, events: bool = True) -> web.Application:
    """The aiohttp application: `/slack/events` (when `events`), `/healthz`, `/readyz`,
    `/metrics`."""
    from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request

    async def slack_events(request: web.Request) -> web.Response:
        try:
            bolt_request = await to_bolt_request(request)
        except ValueError:  # a body that is neither JSON nor a form Slack would send
            return web.json_response({"error": "invalid request body"}, status=400)
        bolt_response = await app.async_dispatch(bolt_request)
        return await to_aiohttp_response(bolt_response)

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "team": service.team_id})

    async def readyz(_request: web.Request) -> web.Response:
        problem = await database_ready(service)
        if problem is not None:
            return web.json_response({"ok": False, "problem": problem}, status=503)
        return web.json_response({"ok": True, "team": service.team_id})

    async def metrics(_request: web.Request) -> web.Response:
        try:
            await service.metrics.refresh(service.db)
        except Exception as exc:  # the backlog gauges keep their last value; /readyz says why
            log.warning("metrics: could not read the outbox backlog: %s", exc)
        return web.Response(
            body=service.metrics.exposition(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    server = web.Application()
    if events:
        server.router.add_post("/slack/events", slack_events)
    server.router.add_get("/healthz", healthz)
    server.router.add_get("/readyz", readyz)
    server.router.add_get("/metrics", metrics)
    return server
