"""Classify a run's failure: retry or not, a detail for operators, a sentence for people.

`classify_error` turns any exception of a run into `TransientError` (worth re-dispatching)
or `PermanentError`. Its `detail` tells 401, 403, 404 (model name or base URL), 429,
quota, timeout and connection apart and says what to fix; its `public` sentence never
carries library advice or response bodies. It logs nothing: the caller decides where the
detail goes (the executor's log line, `flotilla check`'s table).
"""

from __future__ import annotations

from datetime import timedelta

from pydantic_ai.exceptions import (
    ConcurrencyLimitExceeded,
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelHTTPError,
    ModelNotFoundError,
    ModelQuotaExceededError,
    ModelRateLimitError,
    ModelRequestRejectedError,
    ModelRequestTimeout,
    ModelServerError,
    ModelTimeoutError,
    ModelUnavailableError,
    RunTimedOut,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
    UserError,
)

from flotilla.agents.core.errors import PermanentError, RunError, StorageError, TransientError

# Sentences for a person in the thread: short, no status codes, no advice they cannot act on.
PUBLIC_UNREACHABLE = "I can't reach my model right now; an admin has been told."
PUBLIC_RETRYING = "My model is busy or slow right now; I'll try again shortly."
PUBLIC_QUOTA = "My model's account has run out of credit; an admin has been told."
PUBLIC_TOO_LONG = "This step needed more model calls or tokens than it is allowed, so I stopped it."
PUBLIC_BAD_OUTPUT = "My model did not give a usable answer for this step."
PUBLIC_UNKNOWN = "Something went wrong while working on this step; an admin has been told."
PUBLIC_STORAGE = "I'm having trouble with my storage, I'll continue when it's back."

_TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
_KEY_SETTINGS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def classify_error(exc: BaseException, model: str | None = None) -> RunError:
    """Map any failure of a run to `TransientError` or `PermanentError` (see the module doc).

    `model` is the run's model label (`provider:name`, as `agents.running.models.model_label`
    gives it); it names the provider and the key setting in the detail. A `RunError`
    passes through unchanged.
    """
    if isinstance(exc, RunError):
        return exc
    if is_storage_error(exc):  # before ConnectionError: a database outage is not the model's
        return storage_error(exc)
    where = _where(exc, model)
    if isinstance(exc, ModelAPIError):
        return _provider_error(exc, where, model)
    if isinstance(exc, ConcurrencyLimitExceeded | TimeoutError | ConnectionError):
        return TransientError(
            f"{where}: the run could not complete in time ({type(exc).__name__}).",
            public=PUBLIC_RETRYING,
        )
    if isinstance(exc, UsageLimitExceeded):
        return PermanentError(
            f"{where}: the run hit its usage limit (tokens, requests or tool calls): {exc}",
            public=PUBLIC_TOO_LONG,
        )
    if isinstance(exc, UnexpectedModelBehavior):
        return PermanentError(
            f"{where}: the model did not produce a valid answer: {_first_line(exc)}",
            public=PUBLIC_BAD_OUTPUT,
        )
    if isinstance(exc, UserError):  # pydantic-ai's configuration errors (a missing key …)
        return PermanentError(
            f"{where}: the model is not configured: {_first_line(exc)}", public=PUBLIC_UNREACHABLE
        )
    return PermanentError(
        f"{where}: the run failed with {type(exc).__name__}: {_first_line(exc)}",
        public=PUBLIC_UNKNOWN,
    )


def _provider_error(exc: ModelAPIError, where: str, model: str | None) -> RunError:
    status = exc.status_code if isinstance(exc, ModelHTTPError) else None
    error = _refused(exc, status, where, model) or _not_answered(exc, status, where, model)
    if isinstance(error, TransientError) and exc.retry_after:  # the provider's Retry-After
        error.retry_after = timedelta(seconds=exc.retry_after)
    return error


def _refused(
    exc: ModelAPIError, status: int | None, where: str, model: str | None
) -> RunError | None:
    """Quota, key and model-name problems: an operator must fix something, no retry."""
    key = _key_setting(model)
    if isinstance(exc, ModelQuotaExceededError) or status == 402:
        return PermanentError(
            f"{where}: the account's quota or credits are used up (HTTP {status or '?'}); "
            "top up the account or use another key.",
            public=PUBLIC_QUOTA,
        )
    if status == 401 or (isinstance(exc, ModelAuthenticationError) and status != 403):
        return PermanentError(
            f"{where}: the API key was refused (HTTP 401); check {key}.", public=PUBLIC_UNREACHABLE
        )
    if status == 403:
        return PermanentError(
            f"{where}: the API key may not use this model or endpoint (HTTP 403); check the "
            f"key's project and permissions ({key}).",
            public=PUBLIC_UNREACHABLE,
        )
    if status == 404 or isinstance(exc, ModelNotFoundError):
        hint = ""
        if isinstance(exc, ModelHTTPError) and exc.suggested_model_id:
            hint = f" (did you mean {exc.suggested_model_id!r}?)"
        if _provider(model) == "openai":  # an OpenAI-compatible endpoint: its URL may be off
            found, fix = "the model name or the base URL", " and OPENAI_BASE_URL"
        else:
            found, fix = "the model name", ""
        return PermanentError(
            f"{where}: {found} was not found (HTTP 404){hint}; check FLOTILLA_MODEL (or the "
            f"agent's model){fix}.",
            public=PUBLIC_UNREACHABLE,
        )
    return None


def _not_answered(
    exc: ModelAPIError, status: int | None, where: str, model: str | None
) -> RunError:
    """Rate limits, timeouts, connection and server trouble (retried); other rejections."""
    if isinstance(exc, ModelRateLimitError) or status == 429:
        after = f", retry after {exc.retry_after:g}s" if exc.retry_after else ""
        return TransientError(
            f"{where}: rate limited by the provider (HTTP 429{after}).", public=PUBLIC_RETRYING
        )
    if isinstance(exc, ModelRequestTimeout | ModelTimeoutError | RunTimedOut):
        return TransientError(f"{where}: the request timed out.", public=PUBLIC_RETRYING)
    if isinstance(exc, ModelConnectionError):
        phase = f" ({exc.phase})" if exc.phase else ""
        return TransientError(
            f"{where}: could not connect to the provider{phase}; {endpoint_advice(model)}.",
            public=PUBLIC_UNREACHABLE,
        )
    if isinstance(exc, ModelUnavailableError | ModelServerError) or (status or 0) >= 500:
        return TransientError(
            f"{where}: the provider is unavailable or failing (HTTP {status or '?'}).",
            public=PUBLIC_RETRYING,
        )
    if status in _TRANSIENT_STATUS:
        return TransientError(
            f"{where}: the provider answered HTTP {status}.", public=PUBLIC_RETRYING
        )
    if isinstance(exc, ModelRequestRejectedError) or status is not None:
        return PermanentError(
            f"{where}: the provider rejected the request (HTTP {status or '?'}, "
            f"{exc.provider_error_code or exc.provider_error_type or 'no error code'}).",
            public=PUBLIC_UNKNOWN,
        )
    return PermanentError(
        f"{where}: the model did not produce a valid answer: {_first_line(exc)}",
        public=PUBLIC_BAD_OUTPUT,
    )


def _where(exc: BaseException, model: str | None) -> str:
    name = model or (exc.model_name if isinstance(exc, ModelAPIError) else None)
    return f"model {name}" if name else "agent run"


def _provider(model: str | None) -> str:
    return (model or "").partition(":")[0].removesuffix("-chat")


def _key_setting(model: str | None) -> str:
    return _KEY_SETTINGS.get(_provider(model), "the provider's API key")


def endpoint_advice(model: str | None) -> str:
    """What to check when `model`'s provider cannot be reached: the settings of that
    provider only (an Anthropic model is not pointed anywhere by OPENAI_BASE_URL)."""
    provider = _provider(model)
    if provider == "openai":
        return "check the network and OPENAI_BASE_URL (or the model's @base_url)"
    if provider == "anthropic":
        return "check the network (a proxy or firewall) and that Anthropic's API is reachable"
    return "check the network and the provider's address"


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


# asyncpg's errors of a lost or refused connection (by name: asyncpg need not be imported)
_ASYNCPG_CONNECTION = frozenset(
    {
        "PostgresConnectionError",
        "ConnectionDoesNotExistError",
        "ConnectionFailureError",
        "ConnectionRejectionError",
        "ClientCannotConnectError",
        "CannotConnectNowError",
        "AdminShutdownError",
        "CrashShutdownError",
        "TooManyConnectionsError",
        "InterfaceError",
    }
)
_DRIVERS = ("sqlalchemy", "asyncpg", "aiosqlite", "sqlite3")


def is_storage_error(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is the database being unreachable or busy:
    SQLAlchemy's OperationalError/InterfaceError, asyncpg's connection errors, SQLite's
    "database is locked", or a socket error raised inside a database driver."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, StorageError) or _is_driver_outage(current):
            return True
        current = current.__cause__ or current.__context__
    return False


def _is_driver_outage(exc: BaseException) -> bool:
    from sqlalchemy import exc as sa

    if isinstance(exc, sa.OperationalError) and type(exc.orig).__module__ == "sqlite3":
        return _sqlite_unavailable(str(exc.orig))  # SQLite says "no such table" so too
    if isinstance(exc, sa.OperationalError | sa.InterfaceError | sa.DisconnectionError):
        return True
    if isinstance(exc, sa.DBAPIError) and exc.connection_invalidated:
        return True
    kind = type(exc)
    if kind.__module__.startswith("asyncpg") and kind.__name__ in _ASYNCPG_CONNECTION:
        return True
    if kind.__module__ == "sqlite3" and kind.__name__ == "OperationalError":
        return _sqlite_unavailable(str(exc))
    if isinstance(exc, OSError | TimeoutError):  # a refused socket: only inside a driver
        return _raised_in_driver(exc)
    return False


def _sqlite_unavailable(message: str) -> bool:
    return any(w in message for w in ("locked", "busy", "unable to open", "disk I/O"))


def _raised_in_driver(exc: BaseException) -> bool:
    trace = exc.__traceback__
    while trace is not None:
        module = str(trace.tb_frame.f_globals.get("__name__", ""))
        if module.split(".")[0] in _DRIVERS:
            return True
        trace = trace.tb_next
    return False


def storage_error(exc: BaseException) -> StorageError:
    """The database could not be reached: a `StorageError` (retried, never the model's
    fault) whose public sentence says storage is the trouble."""
    if isinstance(exc, StorageError):
        return exc
    return StorageError(
        f"the database is unreachable or busy ({type(exc).__name__}: {_first_line(exc)})",
        public=PUBLIC_STORAGE,
    )
