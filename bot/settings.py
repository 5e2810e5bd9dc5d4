"""Flotilla's one typed settings object.

Read from the environment and an optional `.env` file. The composition root (`bot/cli.py`,
`bot/app.py`) builds it once and hands plain values down: `storage/` receives a database
URL, `agents/` a model string, so neither lower layer reads the environment itself.
Every field is documented in the README's configuration table.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import AliasChoices, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from flotilla.bot.file_settings import FileSettings
from flotilla.bot.lease_settings import LeaseSettings
from flotilla.bot.live_thread_settings import LiveThreadSettings
from flotilla.bot.retry_settings import RetrySettings
from flotilla.bot.scheduler_settings import SchedulerSettings
from flotilla.bot.service_settings import ServiceSettings


class ConfigurationError(ValueError):
    """A setting is missing or wrong; `str()` says which, and how to fix it."""

    exit_code = 3


class DatabaseUnavailable(ConfigurationError):
    """The database cannot be reached, or is not at the schema this version needs."""

    exit_code = 4


# The topics are listed last first: pydantic orders the fields from the furthest base on, so
# they stay in the order service, files, retries, leases, scheduler, live thread (the order
# validation errors are reported in).
class Settings(
    LiveThreadSettings,
    SchedulerSettings,
    LeaseSettings,
    RetrySettings,
    FileSettings,
    ServiceSettings,
    BaseSettings,
):
    """Configuration of one Flotilla process. Secrets are `SecretStr`: hidden in reprs and logs."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=True,
    )


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
