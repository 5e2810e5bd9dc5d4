"""Flotilla's one typed settings object.

Read from the environment and an optional `.env` file. The composition root (`bot/cli.py`,
`bot/app.py`) builds it once and hands plain values down: `storage/` receives a database
URL, `agents/` a model string, so neither lower layer reads the environment itself.
Every field is documented in the README's configuration table.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

if TYPE_CHECKING:  # agents.models loads pydantic-ai: only when the keys are needed
    from agents.files import FilePolicy
    from agents.models import ProviderKeys


def _default_file_types() -> tuple[str, ...]:
    from agents.files import DEFAULT_TYPES

    return DEFAULT_TYPES


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


class ConfigurationError(ValueError):
    """A setting is missing or wrong; `str()` says which, and how to fix it."""

    exit_code = 3


class DatabaseUnavailable(ConfigurationError):
    """The database cannot be reached, or is not at the schema this version needs."""

    exit_code = 4


class Settings(BaseSettings):
    """Configuration of one Flotilla process. Secrets are `SecretStr`: hidden in reprs and logs."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
    )

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
    # how many transient failures a step may have; the old name is still read
    max_transient_failures: int = Field(
        default=3,
        ge=1,
        le=20,
        validation_alias=AliasChoices(
            "FLOTILLA_MAX_TRANSIENT_FAILURES", "FLOTILLA_MAX_STEP_ATTEMPTS"
        ),
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
    http_port: int = Field(default=3000, validation_alias=AliasChoices("FLOTILLA_HTTP_PORT"))
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
        validation_alias=AliasChoices("FLOTILLA_EVENT_RETENTION_HOURS"),
        description="How long processed-event ids are kept for de-duplication (Slack "
        "retries for minutes).",
    )
    file_max_bytes: int = Field(
        default=5 * 1024 * 1024,
        ge=1,
        le=1 << 30,
        validation_alias=AliasChoices("FLOTILLA_FILE_MAX_BYTES"),
        description="The largest attachment Flotilla fetches (and file an agent may write), "
        "in bytes; counted as the bytes arrive, whatever Content-Length says.",
    )
    file_types: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(_default_file_types()),
        validation_alias=AliasChoices("FLOTILLA_FILE_TYPES"),
        description="Comma-separated media types of attachments Flotilla takes (`*` "
        "wildcards, e.g. text/*,application/pdf,image/png); others get a sentence.",
    )
    file_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["https://files.slack.com"],
        validation_alias=AliasChoices("FLOTILLA_FILE_HOSTS"),
        description="Comma-separated origins attachments are fetched from with the bot "
        "token; a file URL anywhere else is never fetched.",
    )
    file_storage: Literal["database", "disk"] = Field(
        default="database",
        validation_alias=AliasChoices("FLOTILLA_FILE_STORAGE"),
        description="Where file bytes are kept: in the database, or on disk under "
        "FLOTILLA_FILE_DIR.",
    )
    file_dir: str = Field(
        default="flotilla-files",
        validation_alias=AliasChoices("FLOTILLA_FILE_DIR"),
        description="The folder for file bytes when FLOTILLA_FILE_STORAGE=disk.",
    )
    file_retention_days: float = Field(
        default=7.0,
        gt=0,
        validation_alias=AliasChoices("FLOTILLA_FILE_RETENTION_DAYS"),
        description="How long file bytes are kept; housekeeping deletes them after (the "
        "file records stay).",
    )
    run_lease_seconds: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        validation_alias=AliasChoices("FLOTILLA_RUN_LEASE_SECONDS"),
        description="After a crash, another replica takes a running step over within this.",
    )
    heartbeat_seconds: float = Field(
        default=5.0,
        gt=0,
        validation_alias=AliasChoices("FLOTILLA_HEARTBEAT_SECONDS"),
        description="How often a running step renews its lease (and notices a cancel); "
        "less than half the lease.",
    )
    inbox_claim_seconds: float = Field(
        default=60.0,
        ge=5,
        validation_alias=AliasChoices("FLOTILLA_INBOX_CLAIM_SECONDS"),
        description="A stored click, submission or command whose handling was cut short "
        "(a crash after the ack) is replayed after this many seconds.",
    )

    @field_validator("file_types", "file_hosts", mode="before")
    @classmethod
    def _comma_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("file_hosts")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            parts = urlsplit(origin)
            if parts.scheme not in ("https", "http") or not parts.hostname or parts.path.strip("/"):
                raise ValueError(f"{origin!r} is not an origin like https://files.slack.com")
        return [o.rstrip("/") for o in value]

    def file_policy(self) -> FilePolicy:
        """What attachments are taken and how file bytes are kept (for the service)."""
        from agents.files import FilePolicy
        from storage.files import ByteStore

        store = ByteStore(
            where=self.file_storage,
            directory=Path(self.file_dir),
            retention=timedelta(days=self.file_retention_days),
        )
        return FilePolicy(
            max_bytes=self.file_max_bytes, allowed_types=tuple(self.file_types), store=store
        )

    # --- the scheduler: admission control (admins adjust them with `/flotilla quota`) ---
    scheduler_capacity: int = Field(
        default=16,
        ge=1,
        le=1000,
        validation_alias=AliasChoices("FLOTILLA_SCHEDULER_CAPACITY"),
        description="Concurrent agent runs (steps and commander turns) across the deployment.",
    )
    scheduler_process_capacity: int = Field(
        default=8,
        ge=1,
        le=1000,
        validation_alias=AliasChoices("FLOTILLA_SCHEDULER_PROCESS_CAPACITY"),
        description="Concurrent agent runs in one process.",
    )
    agent_concurrency: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("FLOTILLA_AGENT_CONCURRENCY"),
        description="Per-agent caps, e.g. `researcher: 2, writer: 1` (unlisted: no cap).",
    )
    tool_concurrency: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("FLOTILLA_TOOL_CONCURRENCY"),
        description="Per-tool or MCP-server caps, e.g. `http_fetch: 4, mcp:crm.example.com: 1`.",
    )
    channel_weights: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("FLOTILLA_CHANNEL_WEIGHTS"),
        description="Fair-share weights by channel id, e.g. `C0123: 2` (default 1).",
    )
    budget_workspace_day: int = Field(
        default=0, ge=0, validation_alias=AliasChoices("FLOTILLA_BUDGET_WORKSPACE_DAY")
    )
    budget_workspace_month: int = Field(
        default=0, ge=0, validation_alias=AliasChoices("FLOTILLA_BUDGET_WORKSPACE_MONTH")
    )
    budget_channel_day: int = Field(
        default=0, ge=0, validation_alias=AliasChoices("FLOTILLA_BUDGET_CHANNEL_DAY")
    )
    budget_channel_month: int = Field(
        default=0, ge=0, validation_alias=AliasChoices("FLOTILLA_BUDGET_CHANNEL_MONTH")
    )
    budget_policy: Literal["wait", "fail"] = Field(
        default="wait",
        validation_alias=AliasChoices("FLOTILLA_BUDGET_POLICY"),
        description="A run that would exceed a token budget waits for the reset, or its "
        "step fails.",
    )
    batch_plan_steps: int = Field(
        default=6,
        ge=1,
        validation_alias=AliasChoices("FLOTILLA_BATCH_PLAN_STEPS"),
        description="A plan with more steps than this is batch work (after interactive work).",
    )
    scheduler_poll_seconds: float = Field(
        default=2.0,
        gt=0,
        le=60,
        validation_alias=AliasChoices("FLOTILLA_SCHEDULER_POLL_SECONDS"),
        description="An admission pass at least this often (other processes' freed slots).",
    )

    @field_validator("agent_concurrency", "tool_concurrency", "channel_weights", mode="before")
    @classmethod
    def _split_pairs(cls, value: object) -> object:
        """`name: 2, other: 1` (or `name=2`) as a mapping."""
        if not isinstance(value, str):
            return value
        pairs: dict[str, str] = {}
        for part in value.split(","):
            if not part.strip():
                continue
            name, sep, number = part.replace("=", ":").rpartition(":")
            if not sep or not name.strip():
                raise ValueError(f"write `name: number` pairs separated by commas, not {part!r}")
            pairs[name.strip()] = number.strip()
        return pairs

    def budgets(self) -> dict[str, int]:
        """The token budgets by scope and period (0: none)."""
        return {
            "workspace_day": self.budget_workspace_day,
            "workspace_month": self.budget_workspace_month,
            "channel_day": self.budget_channel_day,
            "channel_month": self.budget_channel_month,
        }

    stream_append_seconds: float = Field(
        default=1.5,
        ge=0,
        le=60,
        validation_alias=AliasChoices("FLOTILLA_STREAM_APPEND_SECONDS"),
        description="An answer streamed into a thread grows at most this often (seconds).",
    )

    channel_posts_per_second: float = Field(
        default=1.0,
        ge=0,
        le=50,
        validation_alias=AliasChoices("FLOTILLA_CHANNEL_POSTS_PER_SECOND"),
        description="New messages per second per channel, sustained (0: not paced).",
    )
    channel_post_burst: int = Field(
        default=2,
        ge=1,
        le=20,
        validation_alias=AliasChoices("FLOTILLA_CHANNEL_POST_BURST"),
        description="New messages one channel may get at once after a quiet spell.",
    )

    native_plan_display: bool = Field(
        default=True,
        validation_alias=AliasChoices("FLOTILLA_NATIVE_PLAN_DISPLAY"),
        description="Show each plan also as Slack's native plan display where the workspace "
        "has it (the card then shows the plan's start and end).",
    )

    @field_validator("heartbeat_seconds")
    @classmethod
    def _beats_within_the_lease(cls, value: float, info: ValidationInfo) -> float:
        lease = info.data.get("run_lease_seconds")
        if lease is not None and value >= lease / 2:
            raise ValueError(
                f"must be less than half of FLOTILLA_RUN_LEASE_SECONDS ({lease:g} s), so a "
                f"missed heartbeat does not lose the lease: use at most {lease / 3:g}"
            )
        return value

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
        """The model providers' keys and base URL, to hand to `agents.models` explicitly."""
        from agents.models import ProviderKeys

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


def _setting_name(loc: tuple[int | str, ...]) -> str:
    field = Settings.model_fields.get(str(loc[0])) if loc else None
    alias = field.validation_alias if field is not None else None
    if isinstance(alias, AliasChoices) and alias.choices:
        return str(alias.choices[0])
    return str(loc[0]).upper() if loc else "a setting"


def load_settings() -> Settings:
    """The settings from the environment and `.env`; an invalid value is a
    `ConfigurationError` naming each setting and what to write instead."""
    try:
        return Settings()
    except (UnicodeDecodeError, OSError) as exc:  # the .env file itself cannot be read
        raise ConfigurationError(
            f"cannot read the .env file in {Path.cwd()}: {exc}; save it as UTF-8 text "
            "with one NAME=value per line"
        ) from None
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            message = str(error["msg"]).removeprefix("Value error, ")
            problems.append(f"{_setting_name(error['loc'])}: {message}")
        raise ConfigurationError(
            "invalid settings (from the environment or .env):\n  " + "\n  ".join(problems)
        ) from None
