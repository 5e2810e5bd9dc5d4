"""`flotilla check`: is this configuration ready to serve? One finding per check.

Slack (the bot token via `auth.test`, the scopes `manifest.yml` asks for), the mode's
credentials (Socket Mode's app token, HTTP mode's signing secret), the database (reachable,
at the schema this version needs) and the model (one minimal real request: key, model
name, base URL). `flotilla run` runs the same checks before it serves.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.bot.manifest import commander_manifest
from flotilla.bot.settings import DatabaseUnavailable, Settings
from flotilla.storage import migrate
from flotilla.storage.db import Database

log = logging.getLogger(__name__)
Level = Literal["ok", "warning", "error"]
CONNECT_TIMEOUT_S = 10.0
MODEL_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's result: `sentence` says what was found, and for a problem how to fix it."""

    check: str
    level: Level
    sentence: str
    passing: bool = False  # a problem that may pass by itself (a timeout, a 5xx, a 429)


# --- database ---------------------------------------------------------------------------


async def open_database(settings: Settings) -> Database:
    """A `Database` that answered a first connection; `DatabaseUnavailable` otherwise."""
    path = settings.sqlite_path()
    if path is not None and not path.parent.is_dir():  # say so before aiosqlite tries
        raise DatabaseUnavailable(
            database_problem(settings, FileNotFoundError("the folder does not exist"))
        )
    db = Database(settings.database_url)
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            async with db.engine.connect():
                pass
    except Exception as exc:  # every driver has its own errors; all mean "cannot connect"
        await db.dispose()
        raise DatabaseUnavailable(database_problem(settings, exc)) from exc
    return db


def no_database_yet(settings: Settings) -> str | None:
    """A sentence when the SQLite file of the settings does not exist yet (in a folder that
    does); None otherwise. Asking a database for its revision must not create it."""
    path = settings.sqlite_path()
    if path is None:
        return None
    name = str(path).partition("?")[0]  # sqlite+aiosqlite:///file.db?timeout=5
    if name == ":memory:" or name.startswith("file:") or not path.parent.is_dir():
        return None
    if Path(name).exists():
        return None
    return (
        f"there is no database yet: {Path(name).absolute()} does not exist; "
        "`flotilla db upgrade` (or `flotilla run`) creates it"
    )


def database_problem(settings: Settings, exc: BaseException) -> str:
    """A sentence for a database that cannot be used, naming it without credentials, with the
    fix that fits: a server that does not answer, a database or a role that does not exist,
    a refused password."""
    where = settings.database_label()
    if isinstance(exc, TimeoutError):
        reason = f"no answer within {CONNECT_TIMEOUT_S:g} seconds"
    else:
        cause = getattr(exc, "orig", None) or exc  # SQLAlchemy wraps the driver's error
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:200]
    path = settings.sqlite_path()
    if path is not None:
        hint = f"check that the folder {str(path.parent) or '.'!r} exists and is writable"
    else:
        hint = _postgres_hint(settings, exc, reason)
    return f"cannot use the database {where}: {reason}; {hint}"


def _postgres_hint(settings: Settings, exc: BaseException, reason: str) -> str:
    from sqlalchemy.engine import make_url

    url = make_url(settings.database_url)
    state = _sqlstate(exc)
    lowered = reason.lower()
    if state == "3D000":  # invalid_catalog_name: the server answered, the database is missing
        name = url.database or "flotilla"
        return (
            f"the server answered: create the database (`createdb {name}` or CREATE DATABASE "
            f"{name}) or fix its name in FLOTILLA_DATABASE_URL"
        )
    if state == "28000" and "role" in lowered and "does not exist" in lowered:
        user = url.username or "postgres"
        return (
            f"the server answered: create the role (CREATE ROLE {user} LOGIN PASSWORD '…') "
            "or fix the user in FLOTILLA_DATABASE_URL"
        )
    if state == "28P01" or "password" in lowered or "authentication" in lowered:
        return "check the user and password in FLOTILLA_DATABASE_URL"
    if state == "28000":  # pg_hba.conf has no entry for this host, user and database
        return (
            "the server refused this connection (pg_hba.conf): allow it there, or connect as "
            "another user or from another host"
        )
    if state is None and isinstance(exc, OSError | TimeoutError):
        return "check the host, the port and that PostgreSQL is running"
    return "check FLOTILLA_DATABASE_URL"


def _sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of the driver's error under SQLAlchemy's wrapping, None without one."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        state = getattr(current, "sqlstate", None)
        if isinstance(state, str):
            return state
        current = getattr(current, "orig", None) or current.__cause__
    return None


async def check_database(settings: Settings) -> list[Finding]:
    missing = no_database_yet(settings)
    if missing is not None:  # not created by a check: `flotilla run` creates it
        return [Finding("database", "warning", missing)]
    try:
        db = await open_database(settings)
    except DatabaseUnavailable as exc:
        return [Finding("database", "error", str(exc))]
    try:
        current = await migrate.current_revision(db)
    finally:
        await db.dispose()
    head = migrate.head_revision()
    where = settings.database_label()
    if current == head:
        return [Finding("database", "ok", f"{where} is reachable, at revision {head}")]
    return [
        Finding(
            "database",
            "warning",
            f"{where} is at revision {current or '(empty)'}, this version needs {head}: "
            "`flotilla run` upgrades it when it starts (or run `flotilla db upgrade`)",
        )
    ]


# --- Slack ------------------------------------------------------------------------------


def _needed_scopes() -> set[str]:
    return set(commander_manifest()["oauth_config"]["scopes"]["bot"])


async def check_slack(settings: Settings, client: AsyncWebClient | None = None) -> list[Finding]:
    """The bot token and its scopes, then the mode's own credentials."""
    if settings.slack_bot_token is None:
        return [
            Finding(
                "slack token",
                "error",
                "SLACK_BOT_TOKEN is not set: copy the Bot User OAuth Token (xoxb-…) from your "
                "app's OAuth & Permissions page (or try Flotilla locally with `flotilla dev`)",
            ),
            *check_mode(settings),
        ]
    from flotilla.bot.identities import make_client

    client = client or make_client(
        settings.slack_bot_token.get_secret_value(), settings.slack_api_url
    )
    auth, granted = await _auth(settings, client)
    findings = [auth] if granted is None else [auth, _scopes(granted)]
    return [*findings, *check_mode(settings), *await _app_token(settings)]


async def _auth(settings: Settings, client: AsyncWebClient) -> tuple[Finding, str | None]:
    """`auth.test`, and the token's scopes (Slack lists them in a header of every answer)."""
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            auth = await client.auth_test()
    except SlackApiError as exc:
        error = exc.response.get("error", "error") if exc.response is not None else "error"
        return Finding(
            "slack token",
            "error",
            f"Slack refused SLACK_BOT_TOKEN ({error}): copy the Bot User OAuth Token (xoxb-…) "
            "again from your app's OAuth & Permissions page and reinstall the app if needed",
        ), None
    except Exception as exc:  # DNS, refused connection, timeout: Slack is not reachable
        return Finding(
            "slack token",
            "error",
            f"cannot reach Slack at {settings.slack_api_url} ({type(exc).__name__}): "
            "check the network and SLACK_API_URL",
        ), None
    found = Finding(
        "slack token",
        "ok",
        f"connected to workspace {auth.get('team')!s} ({auth.get('team_id')}) as "
        f"{auth.get('user')!s}",
    )
    headers = {k.lower(): v for k, v in (auth.headers or {}).items()}
    return found, str(headers.get("x-oauth-scopes", "") or "")


def _scopes(granted_header: str) -> Finding:
    granted = {s.strip() for s in granted_header.split(",") if s.strip()}
    missing = sorted(_needed_scopes() - granted)
    if not granted_header:
        return Finding("slack scopes", "warning", "Slack did not say which scopes the token has")
    if missing:
        return Finding(
            "slack scopes",
            "error",
            f"the bot token lacks {', '.join(missing)}: add them under OAuth & Permissions "
            "(or paste `flotilla manifest` again) and reinstall the app",
        )
    return Finding("slack scopes", "ok", f"all {len(_needed_scopes())} scopes of the manifest")


def check_mode(settings: Settings) -> list[Finding]:
    """Socket Mode needs an xapp- token; HTTP mode needs the signing secret."""
    if settings.socket_mode:
        assert settings.slack_app_token is not None
        if not settings.slack_app_token.get_secret_value().startswith("xapp-"):
            return [
                Finding(
                    "mode",
                    "error",
                    "SLACK_APP_TOKEN is not an app-level token (xapp-…): create one under "
                    "Basic Information → App-Level Tokens with the connections:write scope",
                )
            ]
        return [Finding("mode", "ok", "Socket Mode (SLACK_APP_TOKEN is set)")]
    if settings.slack_signing_secret is None:
        return [
            Finding(
                "mode",
                "error",
                "HTTP mode needs SLACK_SIGNING_SECRET (Basic Information → Signing Secret); "
                "or set SLACK_APP_TOKEN (xapp-…) to connect in Socket Mode instead",
            )
        ]
    return [Finding("mode", "ok", "HTTP mode (SLACK_SIGNING_SECRET is set)")]


async def _app_token(settings: Settings) -> list[Finding]:
    """Socket Mode: the app token opens a connection (apps.connections.open)."""
    token = settings.slack_app_token
    if token is None or not token.get_secret_value().startswith("xapp-"):
        return []
    from flotilla.bot.identities import make_client

    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            await make_client(token.get_secret_value(), settings.slack_api_url).api_call(
                "apps.connections.open"
            )
    except SlackApiError as exc:
        error = exc.response.get("error", "error") if exc.response is not None else "error"
        return [
            Finding(
                "socket mode",
                "error",
                f"Slack refused SLACK_APP_TOKEN ({error}): create a new app-level token with "
                "connections:write and turn Socket Mode on in the app's settings",
            )
        ]
    except Exception as exc:
        return [Finding("socket mode", "error", f"cannot reach Slack ({type(exc).__name__})")]
    return [Finding("socket mode", "ok", "the app-level token opens a connection")]


# --- model ------------------------------------------------------------------------------


async def check_model(settings: Settings, model: str | None = None) -> list[Finding]:
    """One minimal real request to the configured model (`offline` needs no network)."""
    from flotilla.agents.core.errors import TransientError
    from flotilla.agents.core.failures import classify_error, endpoint_advice
    from flotilla.agents.running.models import ModelSpecError, model_label, resolve_model

    spec = model or settings.model
    try:
        resolved = resolve_model(spec, settings.provider_keys())
    except ModelSpecError as exc:
        return [Finding("model", "error", f"{exc} (FLOTILLA_MODEL)")]
    from pydantic_ai.messages import ModelRequest
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.settings import ModelSettings

    try:
        async with asyncio.timeout(MODEL_TIMEOUT_S):
            await resolved.request(
                [ModelRequest.user_text_prompt("Reply with the word OK.")],
                ModelSettings(max_tokens=16),
                ModelRequestParameters(),
            )
    except TimeoutError:  # no answer at all: the network, a proxy, or a stuck endpoint
        return [
            Finding(
                "model",
                "error",
                f"model {model_label(resolved)}: no answer within {MODEL_TIMEOUT_S:g} seconds; "
                f"{endpoint_advice(model_label(resolved))}",
                passing=True,
            )
        ]
    except Exception as exc:  # every failure is classified into a sentence for operators
        error = classify_error(exc, model_label(resolved))
        passing = isinstance(error, TransientError)
        return [Finding("model", "error", error.detail, passing=passing)]
    return [Finding("model", "ok", f"{spec} answered a test request")]


# --- all of it --------------------------------------------------------------------------


async def run_checks(settings: Settings, client: AsyncWebClient | None = None) -> list[Finding]:
    """Every check, in the order an operator fixes them."""
    return [
        *await check_slack(settings, client),
        *await check_database(settings),
        *await check_model(settings),
    ]


def render(findings: list[Finding]) -> str:
    """A table: check, status, sentence."""
    marks = {"ok": "ok", "warning": "WARN", "error": "FAIL"}
    width = max((len(f.check) for f in findings), default=5)
    lines = [f"{f.check:<{width}}  {marks[f.level]:<4}  {f.sentence}" for f in findings]
    errors = sum(f.level == "error" for f in findings)
    lines.append(
        "all checks passed" if not errors else f"{errors} problem(s): fix them and run again"
    )
    return "\n".join(lines)


async def check_locally(settings: Settings) -> list[Finding]:
    """The same checks against a local Slack workspace (the commander installed from the
    manifest) and a throw-away SQLite database; the model is the configured one."""
    import tempfile

    from pydantic import SecretStr

    from flotilla.local_slack import LocalWorkspace

    workspace = LocalWorkspace()
    await workspace.start("127.0.0.1", 0)
    try:
        installed = workspace.install_manifest(commander_manifest(), socket_mode=False)
        with tempfile.TemporaryDirectory() as folder:
            local = settings.model_copy(
                update={
                    "slack_bot_token": SecretStr(installed.bot_token),
                    "slack_app_token": None,
                    "slack_signing_secret": SecretStr(installed.signing_secret),
                    "slack_api_url": workspace.api_url,
                    "database_url": f"sqlite+aiosqlite:///{Path(folder) / 'check.db'}",
                }
            )
            db = Database(local.database_url)
            try:
                await migrate.upgrade(db)
            finally:
                await db.dispose()
            return await run_checks(local)
    finally:
        await workspace.stop()
