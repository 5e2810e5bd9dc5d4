"""The service's own settings: its database, Slack app, model and provider keys, retries and
parallelism, admins, HTTP listener, logging and shutdown (one part of `bot.settings.Settings`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator
from pydantic_settings import NoDecode

if TYPE_CHECKING:  # agents.running.models loads pydantic-ai: only when the keys are needed
    from flotilla.agents.running.models import ProviderKeys

SLACK_API_URL_DEFAULT = "https://slack.com/api/"
DATABASE_URL_DEFAULT = "sqlite+aiosqlite:///flotilla.db"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# URL schemes people write, and the async driver URL Flotilla needs instead
_DRIVERLESS = {
    "sqlite": "sqlite+aiosqlite",
    "postgres": "postgresql+asyncpg",
    "postgresql": "postgresql+asyncpg",
    "postgresql+psycopg2": "postgresql+asyncpg",
    "postgresql+psycopg": "postgresql+asyncpg",
}


class ServiceSettings(BaseModel):
    """The database, Slack, model, admin, HTTP, logging and shutdown settings."""

    database_url: str = Field(
        default=DATABASE_URL_DEFAULT,
        validation_alias=AliasChoices("FLOTILLA_DATABASE_URL"),
        description="SQLAlchemy async URL: sqlite+aiosqlite:///file.db or postgresql+asyncpg://…",
    )
    slack_bot_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_BOT_TOKEN")
    )
    slack_app_token: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_APP_TOKEN")
    )
    slack_signing_secret: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("SLACK_SIGNING_SECRET")
    )
    slack_api_url: str = Field(
        default=SLACK_API_URL_DEFAULT, validation_alias=AliasChoices("SLACK_API_URL")
    )
    model: str = Field(
        default="offline",
        validation_alias=AliasChoices("FLOTILLA_MODEL"),
        description="Default model for the commander and agents, e.g. openai:gpt-4.1.",
    )
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_API_KEY")
    )
    openai_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("OPENAI_BASE_URL")
    )
    anthropic_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("ANTHROPIC_API_KEY")
    )
    allow_model_errors: bool = Field(
        default=False,
        validation_alias=AliasChoices("FLOTILLA_ALLOW_MODEL_ERRORS"),
        description="`flotilla run` serves even when the model check fails (people then read "
        "that the model is unavailable); otherwise it refuses to start.",
    )
    max_parallel: int = Field(
        default=1, ge=1, le=50, validation_alias=AliasChoices("FLOTILLA_MAX_PARALLEL")
    )
    encryption_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("FLOTILLA_ENCRYPTION_KEY"),
        description="Fernet key for agent bot tokens stored in the database.",
    )
    admin_user_ids: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias=AliasChoices("FLOTILLA_ADMIN_USER_IDS")
    )
    form_answerers: Literal["requester", "anyone"] = Field(
        default="requester",
        validation_alias=AliasChoices("FLOTILLA_FORM_ANSWERERS"),
        description="Who may answer a form: the person who made the request (and admins), "
        "or anyone in the channel.",
    )
    http_host: str = Field(default="0.0.0.0", validation_alias=AliasChoices("FLOTILLA_HTTP_HOST"))
    http_port: int = Field(
        default=3000, ge=1, le=65535, validation_alias=AliasChoices("FLOTILLA_HTTP_PORT")
    )
    log_level: str = Field(
        default="INFO",
        validation_alias=AliasChoices("FLOTILLA_LOG_LEVEL"),
        description="DEBUG, INFO, WARNING or ERROR.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        validation_alias=AliasChoices("FLOTILLA_LOG_FORMAT"),
        description="text (one line per record) or json (one object per line).",
    )
    shutdown_grace_seconds: float = Field(
        default=20.0,
        ge=0,
        le=3600,
        validation_alias=AliasChoices("FLOTILLA_SHUTDOWN_GRACE_SECONDS"),
        description="On SIGTERM/SIGINT, how long in-flight runs may finish before the rest "
        "is handed over to another replica.",
    )
    event_retention_hours: float = Field(
        default=24.0,
        gt=0,
        le=24 * 366,
        validation_alias=AliasChoices("FLOTILLA_EVENT_RETENTION_HOURS"),
        description="How long processed-event ids are kept for de-duplication (Slack "
        "retries for minutes); at most a year.",
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _known_level(cls, value: object) -> object:
        if isinstance(value, str):
            if value.strip().upper() not in LOG_LEVELS:
                raise ValueError(f"use one of {', '.join(LOG_LEVELS)}")
            return value.strip().upper()
        return value

    @field_validator("log_format", mode="before")
    @classmethod
    def _lower_format(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("database_url")
    @classmethod
    def _async_driver(cls, value: str) -> str:
        value = value.strip()
        scheme, sep, rest = value.partition("://")
        if not sep:
            raise ValueError(
                "not a database URL: use sqlite+aiosqlite:///flotilla.db or "
                "postgresql+asyncpg://user:password@host:5432/db"
            )
        if scheme in _DRIVERLESS:
            wanted = redact_url(f"{_DRIVERLESS[scheme]}://{rest}")
            raise ValueError(f"Flotilla needs an async driver: write {wanted}")
        if scheme not in ("sqlite+aiosqlite", "postgresql+asyncpg"):
            raise ValueError(
                f"unsupported database {scheme!r}: use sqlite+aiosqlite:// or postgresql+asyncpg://"
            )
        return value

    @field_validator("slack_api_url")
    @classmethod
    def _api_url_ends_with_slash(cls, value: str) -> str:
        # slack_sdk joins method names with urljoin: without the slash the last path
        # segment is silently replaced ("…/api" + "chat.postMessage" -> "…/chat.postMessage").
        if not value.endswith("/"):
            raise ValueError("SLACK_API_URL must end with '/' (e.g. https://slack.com/api/)")
        return value

    @field_validator("admin_user_ids", mode="before")
    @classmethod
    def _split_ids(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @property
    def socket_mode(self) -> bool:
        """Socket Mode when an app-level token is configured, HTTP (Events API) otherwise."""
        return self.slack_app_token is not None

    def provider_keys(self) -> ProviderKeys:
        """The model providers' keys and base URL, to hand to `agents.running.models` explicitly."""
        from flotilla.agents.running.models import ProviderKeys

        return ProviderKeys(
            openai_api_key=_secret(self.openai_api_key),
            openai_base_url=self.openai_base_url or None,
            anthropic_api_key=_secret(self.anthropic_api_key),
        )

    def database_label(self) -> str:
        """The database URL without credentials, for logs and messages."""
        return redact_url(self.database_url)

    def sqlite_path(self) -> Path | None:
        """The database file for a SQLite URL, None for other backends or in-memory."""
        prefix = "sqlite+aiosqlite:///"
        if self.database_url.startswith(prefix) and self.database_url != prefix:
            return Path(self.database_url.removeprefix(prefix))
        return None


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None and value.get_secret_value() else None


def redact_url(url: str) -> str:
    """`postgresql+asyncpg://u:pw@h:5432/db` -> `postgresql+asyncpg://u@h:5432/db`."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}@" if parts.username else ""
    return parts._replace(netloc=user + netloc).geturl()
