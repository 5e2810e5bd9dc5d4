"""Flotilla's one typed settings object.

Read from the environment and an optional `.env` file. The composition root (`bot/cli.py`,
`bot/app.py`) builds it once and hands plain values down: `storage/` receives a database
URL, `agents/` a model string, so neither lower layer reads the environment itself.
Every field is documented in the README's configuration table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

SLACK_API_URL_DEFAULT = "https://slack.com/api/"
DATABASE_URL_DEFAULT = "sqlite+aiosqlite:///flotilla.db"


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
    max_step_attempts: int = Field(
        default=3, ge=1, le=20, validation_alias=AliasChoices("FLOTILLA_MAX_STEP_ATTEMPTS")
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
    log_level: str = Field(default="INFO", validation_alias=AliasChoices("FLOTILLA_LOG_LEVEL"))

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

    def sqlite_path(self) -> Path | None:
        """The database file for a SQLite URL, None for other backends or in-memory."""
        prefix = "sqlite+aiosqlite:///"
        if self.database_url.startswith(prefix) and self.database_url != prefix:
            return Path(self.database_url.removeprefix(prefix))
        return None
