"""`flotilla run`: serve the real Slack workspace, in Socket Mode or over HTTP.

The HTTP surface comes up first (/healthz answers while the rest loads; /readyz says
"starting"), then the heavy modules load in a thread. Start-up checks Slack, the database
and the model and refuses to start when one fails (a sentence says what to fix); with
`allow_model_errors` (`--allow-model-errors`) a failing model check starts anyway with a
loud ERROR. On SIGTERM or SIGINT it stops taking events
(Socket Mode closed, HTTP site stopped), gives in-flight work
`FLOTILLA_SHUTDOWN_GRACE_SECONDS` to finish and hands the rest over.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from aiohttp import web

from flotilla.bot.http import Serving, http_surface
from flotilla.bot.settings import (
    ConfigurationError,
    DatabaseUnavailable,
    ModelUnavailable,
    Settings,
)

if TYPE_CHECKING:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_sdk.web.async_client import AsyncWebClient

    from flotilla.bot.check import Finding
    from flotilla.bot.service import Options, SlackService
    from flotilla.storage.db import Database

log = logging.getLogger("flotilla.serve")
# Slack's secrets are read once, by the settings; libraries must not read them again
# (Bolt reads SLACK_BOT_TOKEN itself and then warns that the client's token wins).
SLACK_SECRETS = ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET")
# loaded in a thread while /healthz already answers
HEAVY_MODULES = (
    "flotilla.bot.app",
    "flotilla.bot.service",
    "flotilla.bot.check",
    "flotilla.bot.housekeeping",
    "flotilla.storage.migrate",
    "slack_bolt.adapter.socket_mode.async_handler",
)

__all__ = ["ConfigurationError", "options_from", "run"]


def options_from(settings: Settings) -> Options:
    """The service's options from the settings (model keys handed over explicitly)."""
    from flotilla.agents.scheduling.admission_policy import SchedulerOptions
    from flotilla.bot.service import Options

    scheduler = SchedulerOptions(
        capacity=settings.scheduler_capacity,
        process_capacity=settings.scheduler_process_capacity,
        agent_caps=settings.agent_concurrency,
        tool_caps=settings.tool_concurrency,
        weights=settings.channel_weights,
        budgets=settings.budgets(),
        budget_policy=settings.budget_policy,
        batch_steps=settings.batch_plan_steps,
        poll_seconds=settings.scheduler_poll_seconds,
    )

    return Options(
        default_model=settings.model,
        max_parallel=settings.max_parallel,
        retry=settings.retry_policies(),
        admin_user_ids=frozenset(settings.admin_user_ids),
        form_answerers=settings.form_answerers,
        lease_seconds=settings.run_lease_seconds,
        heartbeat_seconds=settings.heartbeat_seconds,
        inbox_claim_seconds=settings.inbox_claim_seconds,
        stream_append_seconds=settings.stream_append_seconds,
        channel_posts_per_second=settings.channel_posts_per_second or None,
        channel_post_burst=settings.channel_post_burst,
        native_plan_display=settings.native_plan_display,
        provider_keys=settings.provider_keys(),
        files=settings.file_policy(),
        file_origins=tuple(settings.file_hosts),
        scheduler=scheduler,
    )


def _refuse(findings: list[Finding]) -> None:
    from flotilla.bot.check import render

    if any(f.level == "error" for f in findings):
        raise ConfigurationError("cannot start:\n" + render(findings))


async def _stop_service(service: SlackService, grace: float) -> list[str]:
    """`service.stop(grace=…)`, returning the keys of the work handed over."""
    stop: Callable[..., Awaitable[object]] = service.stop
    if "grace" not in inspect.signature(stop).parameters:  # a service without hand-over
        await stop()
        return []
    handed = await stop(grace=grace)
    return [str(key) for key in handed] if isinstance(handed, list) else []


def _on_signals(stop: asyncio.Event) -> list[signal.Signals]:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not the main thread
            loop.add_signal_handler(sig, _signalled, stop, sig)
            installed.append(sig)
    return installed


def _signalled(stop: asyncio.Event, sig: signal.Signals) -> None:
    if not stop.is_set():
        log.info("received %s: stopping", sig.name)
    stop.set()


async def _until(stop: asyncio.Event, work: asyncio.Future[Any]) -> bool:
    """Await `work` unless `stop` is set first (then `work` is cancelled): True if done."""
    stopping = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if work in done:
        work.result()
        return True
    work.cancel()
    await asyncio.gather(work, return_exceptions=True)
    return False


async def run(
    settings: Settings,
    *,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve /healthz at once, then check, migrate, start the service and serve Slack until
    SIGTERM/SIGINT (or `stop`)."""
    stop = stop or asyncio.Event()
    signals = _on_signals(stop)
    serving = Serving()
    runner = web.AppRunner(http_surface(serving, events=not settings.socket_mode))
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, settings.http_host, settings.http_port).start()
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on {settings.http_host}:{settings.http_port} ({exc.strerror}): "
                "set FLOTILLA_HTTP_PORT to a free port"
            ) from exc
        log.info(
            "starting: /healthz answers on %s:%s, /readyz once the service runs",
            settings.http_host,
            settings.http_port,
        )
        loading = asyncio.ensure_future(
            asyncio.to_thread(lambda: [importlib.import_module(m) for m in HEAVY_MODULES])
        )
        if await _until(stop, loading):
            await _checked_and_served(settings, serving, runner, ready=ready, stop=stop)
        else:
            log.info("stopped before the service started")
    finally:
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.remove_signal_handler(sig)
        await runner.cleanup()


async def _checked_and_served(
    settings: Settings,
    serving: Serving,
    runner: web.AppRunner,
    *,
    ready: asyncio.Event | None,
    stop: asyncio.Event,
) -> None:
    from flotilla.bot.check import check_slack, open_database
    from flotilla.bot.identities import make_client

    client = make_client(
        settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None,
        settings.slack_api_url,
    )
    _refuse(await check_slack(settings, client))
    for name in SLACK_SECRETS:
        os.environ.pop(name, None)
    db = await open_database(settings)
    try:
        await _model_is_checked(settings)
        await _upgrade(settings, db)
        await _serve(settings, db, client, serving, runner, ready=ready, stop=stop)
    finally:
        await db.dispose()


async def _upgrade(settings: Settings, db: Database) -> None:
    from flotilla.storage import migrate

    try:
        await migrate.upgrade(db)
    except Exception as exc:  # a schema newer than this version, a read-only database …
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise DatabaseUnavailable(
            f"cannot upgrade the schema of {settings.database_label()}: {reason}"
        ) from exc


async def _model_is_checked(settings: Settings) -> None:
    """`ModelUnavailable` when the model cannot work (a wrong name, no key or a refused key),
    unless errors are allowed (then a loud ERROR line, and people read that the model is
    unavailable). A model that does not answer right now (unreachable, a 5xx, rate limited)
    is an outage, not a mistake: a loud ERROR line, and it serves – a restart during a
    model outage must not take the app down."""
    from flotilla.bot.check import check_model

    for finding in await check_model(settings):
        if finding.level != "error":
            continue
        problem = finding.sentence.rstrip(".")
        if finding.passing:  # an outage (unreachable, 5xx, 429): runs retry, so serve
            log.error(
                "the model does not answer: %s. Serving: runs retry until it answers, and "
                "people read that it is being retried (run `flotilla check`).",
                problem,
            )
            continue
        if not settings.allow_model_errors:
            raise ModelUnavailable(
                f"cannot start: the model does not work: {problem}.\nFix it (`flotilla check` "
                "tries the model), or serve anyway with `flotilla run --allow-model-errors` "
                "(or FLOTILLA_ALLOW_MODEL_ERRORS=true): people then read that the model is "
                "unavailable."
            )
        log.error(
            "the model does not work: %s. Serving anyway (FLOTILLA_ALLOW_MODEL_ERRORS): people "
            "will read that the model is unavailable until this is fixed (run `flotilla check`).",
            problem,
        )


async def _serve(
    settings: Settings,
    db: Database,
    client: AsyncWebClient,
    serving: Serving,
    runner: web.AppRunner,
    *,
    ready: asyncio.Event | None,
    stop: asyncio.Event,
) -> None:
    from flotilla.bot.app import build_app
    from flotilla.bot.housekeeping import housekeeping_forever
    from flotilla.bot.metrics import meter
    from flotilla.bot.secrets import TokenCipher
    from flotilla.bot.service import SlackService

    key = settings.encryption_key.get_secret_value() if settings.encryption_key else None
    service = SlackService(
        db,
        client,
        api_url=settings.slack_api_url,
        cipher=TokenCipher(key),
        options=options_from(settings),
    )
    meter(client, service.metrics)
    await service.start()
    retention = timedelta(hours=settings.event_retention_hours)
    housekeeping = asyncio.create_task(
        housekeeping_forever(db, service.metrics, retention, files=True), name="housekeeping"
    )
    secret = settings.slack_signing_secret
    app = build_app(service, signing_secret=secret.get_secret_value() if secret else None)
    handler: AsyncSocketModeHandler | None = None
    try:
        if settings.socket_mode:
            handler = await _socket_mode(settings, app)
        serving.app, serving.service = app, service
        _started(settings, service)
        if ready is not None:
            ready.set()
        await stop.wait()
    finally:
        # stop taking events first, then let in-flight work finish or hand it over
        if handler is not None:
            await handler.close_async()  # type: ignore[no-untyped-call]
        await runner.cleanup()
        housekeeping.cancel()
        await asyncio.gather(housekeeping, return_exceptions=True)
        grace = settings.shutdown_grace_seconds
        log.info("no longer taking events; in-flight work has %gs to finish", grace)
        handed = await _stop_service(service, grace)
        if handed:
            log.info("handed over to another replica: %s", ", ".join(handed))
        log.info("stopped")


async def _socket_mode(settings: Settings, app: object) -> AsyncSocketModeHandler:
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.async_app import AsyncApp

    from flotilla.bot.identities import make_client

    assert settings.slack_app_token is not None and isinstance(app, AsyncApp)
    handler = AsyncSocketModeHandler(
        app,
        settings.slack_app_token.get_secret_value(),
        web_client=make_client(None, settings.slack_api_url),
    )
    await handler.connect_async()  # type: ignore[no-untyped-call]
    return handler


def _started(settings: Settings, service: SlackService) -> None:
    log.info(
        "Flotilla started in %s mode for workspace %s; database %s; model %s; "
        "HTTP on %s:%s (/healthz, /readyz, /metrics%s)",
        "Socket" if settings.socket_mode else "HTTP",
        service.team_id,
        settings.database_label(),
        settings.model,
        settings.http_host,
        settings.http_port,
        "" if settings.socket_mode else ", /slack/events",
        extra={"team": service.team_id},
    )
