"""Flotilla's HTTP surface: Slack's requests, liveness, readiness and metrics.

- `POST /slack/events` – signed requests from Slack (HTTP mode only), handed to Bolt.
- `GET /healthz` – liveness: the process serves requests (no dependency is checked).
- `GET /readyz` – readiness: the service has started and the database answers a query;
  503 with the reason otherwise.
- `GET /metrics` – Prometheus exposition (the outbox backlog is read at scrape time).

`flotilla run` serves this before the service has started (`Serving` still empty): the
process is alive (/healthz) but not ready (/readyz 503 "starting"), and Slack's requests
get a 503, which Slack retries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:  # both are heavy to import: the surface is served before they are loaded
    from slack_bolt.async_app import AsyncApp

    from flotilla.bot.service import SlackService

log = logging.getLogger(__name__)
READY_TIMEOUT_S = 5.0
_KINDS = {"event_callback": "event", "url_verification": "event", "block_actions": "interaction"}


def request_kind(body: dict[str, Any]) -> str:
    """`event`, `interaction` or `command`, for the request-latency metric."""
    if "command" in body:
        return "command"
    return _KINDS.get(str(body.get("type", "")), "interaction")


def measure_requests(app: AsyncApp, service: SlackService) -> None:
    """Time every request from Slack until Bolt acknowledged it (both modes)."""

    # Bolt passes middleware arguments by name: `next` it must be
    async def timed(body: dict[str, Any], next: Callable[[], Awaitable[Any]]) -> Any:
        started = time.perf_counter()
        try:
            return await next()
        finally:
            service.metrics.request_seconds.labels(request_kind(body)).observe(
                time.perf_counter() - started
            )

    app.middleware(timed)


async def database_ready(service: SlackService) -> str | None:
    """None when the database answers, else a sentence saying what is wrong."""
    from sqlalchemy import text

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


@dataclass
class Serving:
    """What the HTTP surface serves: empty while the service starts, then filled in."""

    app: AsyncApp | None = None
    service: SlackService | None = None


def web_app(app: AsyncApp, service: SlackService, *, events: bool = True) -> web.Application:
    """The aiohttp application of a started service (see `http_surface`)."""
    return http_surface(Serving(app, service), events=events)


def http_surface(serving: Serving, *, events: bool = True) -> web.Application:
    """`/slack/events` (when `events`), `/healthz`, `/readyz`, `/metrics` for `serving`."""

    async def slack_events(request: web.Request) -> web.Response:
        if serving.app is None:
            return web.json_response({"error": "starting"}, status=503)  # Slack retries
        from flotilla.bot.edge import dispatch  # refuses what is not Slack's (401/400), then Bolt

        return await dispatch(serving.app, request)

    async def healthz(_request: web.Request) -> web.Response:
        team = serving.service.team_id if serving.service is not None else None
        return web.json_response({"ok": True, "team": team})

    async def readyz(_request: web.Request) -> web.Response:
        if serving.service is None:
            return web.json_response({"ok": False, "problem": "starting"}, status=503)
        problem = await database_ready(serving.service)
        if problem is not None:
            return web.json_response({"ok": False, "problem": problem}, status=503)
        return web.json_response({"ok": True, "team": serving.service.team_id})

    async def metrics(_request: web.Request) -> web.Response:
        if serving.service is None:
            return web.Response(status=503, text="starting\n")
        try:
            await serving.service.metrics.refresh(serving.service.db)
        except Exception as exc:  # the backlog gauges keep their last value; /readyz says why
            log.warning("metrics: could not read the outbox backlog: %s", exc)
        return web.Response(
            body=serving.service.metrics.exposition(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    server = web.Application()
    if events:
        server.router.add_post("/slack/events", slack_events)
    server.router.add_get("/healthz", healthz)
    server.router.add_get("/readyz", readyz)
    server.router.add_get("/metrics", metrics)
    return server
