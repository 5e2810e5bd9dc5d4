"""`flotilla run`: serve the real Slack workspace, in Socket Mode or over HTTP."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

from bot.app import build_app, web_app
from bot.identities import make_client
from bot.secrets import TokenCipher
from bot.service import Flotilla, Options
from bot.settings import Settings
from storage import migrate
from storage.db import Database

log = logging.getLogger(__name__)


class ConfigurationError(ValueError):
    """A setting needed to run is missing; `str()` says which and where to find it."""


def options_from(settings: Settings) -> Options:
    return Options(
        default_model=settings.model,
        max_parallel=settings.max_parallel,
        max_attempts=settings.max_step_attempts,
        admin_user_ids=frozenset(settings.admin_user_ids),
        form_answerers=settings.form_answerers,
    )


def check(settings: Settings) -> None:
    """Refuse to start without the tokens the chosen mode needs."""
    if settings.slack_bot_token is None:
        raise ConfigurationError(
            "SLACK_BOT_TOKEN is not set: copy the Bot User OAuth Token (xoxb-…) from your "
            "app's OAuth & Permissions page (or try Flotilla locally with `flotilla dev`)"
        )
    if not settings.socket_mode and settings.slack_signing_secret is None:
        raise ConfigurationError(
            "HTTP mode needs SLACK_SIGNING_SECRET (Basic Information → Signing Secret); "
            "or set SLACK_APP_TOKEN (xapp-…) to connect in Socket Mode instead"
        )


async def run(settings: Settings, *, ready: asyncio.Event | None = None) -> None:
    """Migrate, start the service and serve until cancelled."""
    check(settings)
    assert settings.slack_bot_token is not None
    db = Database(settings.database_url)
    await migrate.upgrade(db)
    client = make_client(settings.slack_bot_token.get_secret_value(), settings.slack_api_url)
    key = settings.encryption_key.get_secret_value() if settings.encryption_key else None
    service = Flotilla(
        db,
        client,
        api_url=settings.slack_api_url,
        cipher=TokenCipher(key),
        options=options_from(settings),
    )
    await service.start()
    secret = settings.slack_signing_secret
    app = build_app(service, signing_secret=secret.get_secret_value() if secret else None)
    runner: web.AppRunner | None = None
    handler: AsyncSocketModeHandler | None = None
    try:
        if settings.socket_mode:
            assert settings.slack_app_token is not None
            handler = AsyncSocketModeHandler(
                app,
                settings.slack_app_token.get_secret_value(),
                web_client=make_client(None, settings.slack_api_url),
            )
            await handler.connect_async()  # type: ignore[no-untyped-call]
            log.info("connected to Slack in Socket Mode as %s", service.bot_user_id)
        # HTTP mode takes Slack's requests here; both modes serve /healthz and /metrics
        server = web_app(app, service, events=not settings.socket_mode)
        runner = web.AppRunner(server, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, settings.http_host, settings.http_port).start()
        log.info("serving HTTP on %s:%s", settings.http_host, settings.http_port)
        if ready is not None:
            ready.set()
        await asyncio.Event().wait()  # until cancelled (Ctrl-C)
    finally:
        if handler is not None:
            await handler.close_async()  # type: ignore[no-untyped-call]
        if runner is not None:
            await runner.cleanup()
        await service.stop()
        await db.dispose()
