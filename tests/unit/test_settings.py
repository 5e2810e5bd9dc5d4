from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from flotilla.bot.service_settings import DATABASE_URL_DEFAULT, SLACK_API_URL_DEFAULT
from flotilla.bot.settings import (
    ConfigurationError,
    Settings,
    load_settings,
    misnamed_settings,
    setting_names,
)

ENV_NAMES = [
    "FLOTILLA_DATABASE_URL",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_API_URL",
    "FLOTILLA_MODEL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "FLOTILLA_ADMIN_USER_IDS",
    "FLOTILLA_ENCRYPTION_KEY",
    "FLOTILLA_MAX_STEP_ATTEMPTS",
    "FLOTILLA_MAX_TRANSIENT_FAILURES",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no stray .env file is read


def test_defaults() -> None:
    settings = Settings()
    assert settings.database_url == DATABASE_URL_DEFAULT
    assert settings.slack_api_url == SLACK_API_URL_DEFAULT
    assert settings.model == "offline"
    assert settings.slack_bot_token is None
    assert settings.socket_mode is False
    assert settings.admin_user_ids == []
    assert settings.sqlite_path() is not None
    assert settings.sqlite_path().name == "flotilla.db"  # type: ignore[union-attr]


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOTILLA_DATABASE_URL", "postgresql+asyncpg://u@db/flotilla")
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:9000/api/")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-1-abc")
    monkeypatch.setenv("FLOTILLA_MODEL", "anthropic:claude-sonnet-4-5")
    monkeypatch.setenv("FLOTILLA_ADMIN_USER_IDS", "U1, U2")
    settings = Settings()
    assert settings.database_url == "postgresql+asyncpg://u@db/flotilla"
    assert settings.sqlite_path() is None
    assert settings.slack_api_url == "http://127.0.0.1:9000/api/"
    assert settings.socket_mode is True
    assert settings.model == "anthropic:claude-sonnet-4-5"
    assert settings.admin_user_ids == ["U1", "U2"]


def test_api_url_without_trailing_slash_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:9000/api")
    with pytest.raises(ValidationError, match="must end with '/'"):
        Settings()


def test_env_file_is_read() -> None:
    with open(".env", "w") as env_file:
        env_file.write("FLOTILLA_MODEL=openai:gpt-4.1\n")
    assert Settings().model == "openai:gpt-4.1"


def test_secrets_are_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    secrets = {
        "SLACK_BOT_TOKEN": "xoxb-very-secret-bot",
        "SLACK_APP_TOKEN": "xapp-very-secret-app",
        "SLACK_SIGNING_SECRET": "very-secret-signing",
        "OPENAI_API_KEY": "sk-very-secret-openai",
        "ANTHROPIC_API_KEY": "sk-ant-very-secret",
        "FLOTILLA_ENCRYPTION_KEY": "very-secret-fernet",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    shown = repr(settings) + str(settings) + settings.model_dump_json()
    for value in secrets.values():
        assert value not in shown
    assert settings.slack_bot_token is not None
    assert settings.slack_bot_token.get_secret_value() == "xoxb-very-secret-bot"


def test_the_cap_on_transient_failures_under_its_new_and_its_old_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLOTILLA_MAX_STEP_ATTEMPTS", "5")
    assert Settings().max_transient_failures == 5
    monkeypatch.setenv("FLOTILLA_MAX_TRANSIENT_FAILURES", "7")
    assert Settings().max_transient_failures == 7  # the new name wins


def test_file_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from flotilla.bot.serve import options_from

    default = options_from(Settings())
    assert default.file_origins == ("https://files.slack.com",)
    assert default.files.max_bytes == 5 * 1024 * 1024 and "text/*" in default.files.allowed_types
    assert default.files.store.where == "database"
    monkeypatch.setenv("FLOTILLA_FILE_MAX_BYTES", "1000")
    monkeypatch.setenv("FLOTILLA_FILE_TYPES", "text/csv, image/*")
    monkeypatch.setenv("FLOTILLA_FILE_HOSTS", "https://files.example.com/")
    monkeypatch.setenv("FLOTILLA_FILE_STORAGE", "disk")
    monkeypatch.setenv("FLOTILLA_FILE_DIR", str(tmp_path))
    monkeypatch.setenv("FLOTILLA_FILE_RETENTION_DAYS", "2")
    options = options_from(Settings())
    assert options.file_origins == ("https://files.example.com",)
    assert options.files.allowed_types == ("text/csv", "image/*")
    assert options.files.max_bytes == 1000
    assert (options.files.store.where, options.files.store.directory) == ("disk", tmp_path)
    assert options.files.store.retention.days == 2
    monkeypatch.setenv("FLOTILLA_FILE_HOSTS", "files.slack.com")
    with pytest.raises(ValidationError, match="is not an origin"):
        Settings()


def test_scheduler_settings_read_pairs_and_refuse_a_bad_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLOTILLA_AGENT_CONCURRENCY", "researcher: 2, writer=1")
    monkeypatch.setenv("FLOTILLA_TOOL_CONCURRENCY", "mcp:crm.example.com: 1")
    monkeypatch.setenv("FLOTILLA_CHANNEL_WEIGHTS", "C0123: 2.5")
    monkeypatch.setenv("FLOTILLA_BUDGET_CHANNEL_DAY", "50000")
    settings = Settings()
    assert settings.agent_concurrency == {"researcher": 2, "writer": 1}
    assert settings.tool_concurrency == {"mcp:crm.example.com": 1}
    assert settings.channel_weights == {"C0123": 2.5}
    assert settings.budgets()["channel_day"] == 50_000
    assert (settings.scheduler_capacity, settings.scheduler_process_capacity) == (16, 8)
    monkeypatch.setenv("FLOTILLA_AGENT_CONCURRENCY", "researcher")
    with pytest.raises(ValidationError, match="name: number"):
        Settings()


def test_every_environment_name_comes_from_the_models() -> None:
    names = setting_names()
    assert {"FLOTILLA_HTTP_PORT", "SLACK_BOT_TOKEN", "FLOTILLA_ALLOW_MODEL_ERRORS"} <= names
    # the older names of a setting are read, so they are valid too
    assert {"FLOTILLA_MAX_STEP_ATTEMPTS", "FLOTILLA_MAX_TRANSIENT_FAILURES"} <= names
    assert len(names) > len(Settings.model_fields)


def test_a_mistyped_name_in_the_environment_or_dotenv_is_named_with_the_closest(
    tmp_path: Path,
) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("FLOTILLA_MODLE=openai:gpt-4.1\nFLOTILLA_MODEL=offline\nOTHER_TOOL=1\n")
    environ = {
        "FLOTILLA_HTTP_PROT": "3001",
        "FLOTILLA_SLACK_BOT_TOKEN": "xoxb-1",  # a known name with the prefix in front
        "FLOTILLA_NOTHING_LIKE_IT": "1",
        "FLOTILLA_MAX_STEP_ATTEMPTS": "3",  # an older name, still read
        "FLOTILLA_TEST_POSTGRES_URL": "postgresql+asyncpg://…",  # the test suite's own
        "SLACK_BOT_TOKN": "xoxb-2",  # not a FLOTILLA_ name: other tools' names are left alone
        "PATH": "/usr/bin",
    }
    said = misnamed_settings(environ, env_file)
    assert said == [
        "FLOTILLA_HTTP_PROT (in the environment) is not a Flotilla setting and is ignored: "
        "did you mean FLOTILLA_HTTP_PORT?",
        f"FLOTILLA_MODLE (in {env_file}) is not a Flotilla setting and is ignored: "
        "did you mean FLOTILLA_MODEL?",
        "FLOTILLA_NOTHING_LIKE_IT (in the environment) is not a Flotilla setting and is "
        "ignored: the README lists the settings under Configuration",
        "FLOTILLA_SLACK_BOT_TOKEN (in the environment) is not a Flotilla setting and is "
        "ignored: did you mean SLACK_BOT_TOKEN?",
    ]
    assert misnamed_settings({"FLOTILLA_MODEL": "offline"}, tmp_path / "none") == []


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("FLOTILLA_HTTP_PORT", "99999", "less than or equal to 65535"),
        ("FLOTILLA_HTTP_PORT", "0", "greater than or equal to 1"),
        ("FLOTILLA_EVENT_RETENTION_HOURS", "inf", "less than or equal to"),
        ("FLOTILLA_FILE_RETENTION_DAYS", "1e12", "less than or equal to"),
        ("FLOTILLA_INBOX_CLAIM_SECONDS", "1e300", "less than or equal to"),
        ("FLOTILLA_AGENT_CONCURRENCY", "researcher: -1", "is not a cap"),
        ("FLOTILLA_TOOL_CONCURRENCY", "http_fetch: 5000", "is not a cap"),
        ("FLOTILLA_CHANNEL_WEIGHTS", "C0123: inf", "above 0 and at most 1000"),
        ("FLOTILLA_CHANNEL_WEIGHTS", "C0123: 0", "above 0 and at most 1000"),
    ],
)
def test_a_number_out_of_range_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    """Before: FLOTILLA_HTTP_PORT=99999 passed and `run` failed with an OverflowError."""
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=f"{name}: .*{says}"):
        load_settings()


def test_every_float_setting_has_an_upper_bound() -> None:
    """Seconds, hours and days become timedeltas: infinity or 1e300 must be refused."""
    for name, field in Settings.model_fields.items():
        if field.annotation is float:
            bounds = [m for m in field.metadata if hasattr(m, "le") or hasattr(m, "lt")]
            assert bounds, f"{name} has no upper bound"
