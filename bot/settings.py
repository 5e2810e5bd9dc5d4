"""Flotilla's one typed settings object.

Read from the environment and an optional `.env` file. The composition root (`bot/cli.py`,
`bot/app.py`) builds it once and hands plain values down: `storage/` receives a database
URL, `agents/` a model string, so neither lower layer reads the environment itself.
Every field is documented in the README's configuration table.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
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


class ModelUnavailable(ConfigurationError):
    """The model check failed and `flotilla run` was not told to serve anyway."""

    exit_code = 6


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


# FLOTILLA_* names that are not settings: the test suite's own (`tests/`)
NOT_SETTINGS = ("FLOTILLA_TEST_", "FLOTILLA_SCREENSHOTS")


def setting_names() -> frozenset[str]:
    """Every environment name a setting is read from, its older names included (taken from
    the models' aliases, so a new setting is known here at once)."""
    names: set[str] = set()
    for field in Settings.model_fields.values():
        alias = field.validation_alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
        names.update(c.upper() for c in choices if isinstance(c, str))
    return frozenset(names)


def misnamed_settings(
    environ: Mapping[str, str] | None = None, env_file: Path | None = None
) -> list[str]:
    """A sentence for each `FLOTILLA_*` name in the environment or in `.env` that no
    setting reads (it is ignored), with the closest valid name when there is one."""
    environ = os.environ if environ is None else environ
    env_file = Path(str(Settings.model_config.get("env_file"))) if env_file is None else env_file
    places: dict[str, list[str]] = {}
    for name in environ:
        places.setdefault(name, []).append("in the environment")
    for name in _dotenv_names(env_file):
        places.setdefault(name, []).append(f"in {env_file}")
    known = setting_names()
    # compared without the shared prefix, which would make every name look alike
    by_stem = {name.removeprefix("FLOTILLA_"): name for name in known}
    sentences = []
    for name, where in sorted(places.items()):
        upper = name.upper()
        if not upper.startswith("FLOTILLA_") or upper in known or upper.startswith(NOT_SETTINGS):
            continue
        stem = upper.removeprefix("FLOTILLA_")
        close = difflib.get_close_matches(stem, sorted(by_stem), n=1, cutoff=0.6)
        advice = (
            f"did you mean {by_stem[close[0]]}?"
            if close
            else "the README lists the settings under Configuration"
        )
        sentences.append(
            f"{name} ({' and '.join(where)}) is not a Flotilla setting and is ignored: {advice}"
        )
    return sentences


def _dotenv_names(env_file: Path) -> list[str]:
    if not env_file.is_file():
        return []
    from dotenv import dotenv_values

    try:
        return list(dotenv_values(env_file, encoding="utf-8"))
    except (OSError, UnicodeDecodeError):  # load_settings says so; the names are a bonus
        return []
