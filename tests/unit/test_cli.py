"""The command line: every configuration mistake is a sentence with its own exit code.

Each test runs `main()` in a fresh folder (no `.env` around) with only the settings it sets.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from flotilla.bot import cli
from flotilla.bot.cli import (
    EXIT_CHECK,
    EXIT_CONFIG,
    EXIT_DATABASE,
    EXIT_OK,
    EXIT_UNEXPECTED,
    EXIT_USAGE,
    dev_database_url,
    main,
)
from flotilla.bot.settings import load_settings

SETTINGS = (
    "FLOTILLA_DATABASE_URL",
    "FLOTILLA_LOG_LEVEL",
    "FLOTILLA_LOG_FORMAT",
    "FLOTILLA_MODEL",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "FLOTILLA_ALLOW_MODEL_ERRORS",
    "FLOTILLA_HTTP_PORT",
)


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    yield tmp_path
    root = logging.getLogger()  # the CLI's log handler wrote to this test's captured stderr
    for handler in [h for h in root.handlers if h.get_name() == "flotilla"]:
        root.removeHandler(handler)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def no_traceback(err: str) -> None:
    assert "Traceback" not in err and 'File "' not in err


def test_no_command_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys)
    assert code == EXIT_OK and "COMMAND" in out and "check" in out and "manifest" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("flotilla ")


@pytest.mark.parametrize("command", ["run", "check", "dev", "demo", "db", "manifest"])
def test_each_command_help_says_what_it_reads(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "Reads:" in capsys.readouterr().out


def test_an_invalid_log_level_is_a_sentence(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOTILLA_LOG_LEVEL", "verbose")
    code, _, err = run(capsys, "demo")
    assert code == EXIT_CONFIG
    assert "FLOTILLA_LOG_LEVEL: use one of DEBUG, INFO, WARNING, ERROR" in err
    no_traceback(err)


def test_manifest_needs_no_valid_settings(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOTILLA_LOG_LEVEL", "verbose")
    monkeypatch.setenv("FLOTILLA_DATABASE_URL", "nonsense")
    code, out, _ = run(capsys, "manifest")
    assert code == EXIT_OK and yaml.safe_load(out)["display_information"]["name"] == "Flotilla"


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("sqlite:///x.db", "write sqlite+aiosqlite:///x.db"),
        ("postgres://me:hunter2@db:5432/app", "write postgresql+asyncpg://me@db:5432/app"),
        ("mysql+aiomysql://db/app", "use sqlite+aiosqlite:// or postgresql+asyncpg://"),
    ],
)
def test_a_misspelt_database_url_names_the_right_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, url: str, hint: str
) -> None:
    monkeypatch.setenv("FLOTILLA_DATABASE_URL", url)
    code, _, err = run(capsys, "db", "current")
    assert code == EXIT_CONFIG and "FLOTILLA_DATABASE_URL" in err and hint in err
    assert "hunter2" not in err
    no_traceback(err)


def test_an_unreachable_database_is_a_sentence_without_the_password(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOTILLA_DATABASE_URL", "postgresql+asyncpg://me:hunter2@127.0.0.1:1/db")
    code, _, err = run(capsys, "db", "upgrade")
    assert code == EXIT_DATABASE
    assert "cannot use the database postgresql+asyncpg://me@127.0.0.1:1/db" in err
    assert "PostgreSQL is running" in err and "hunter2" not in err
    no_traceback(err)


def test_debug_shows_the_traceback(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, clean: Path
) -> None:
    monkeypatch.setenv("FLOTILLA_DATABASE_URL", f"sqlite+aiosqlite:///{clean}/no/such/dir/x.db")
    code, _, err = run(capsys, "db", "current", "--debug")
    assert code == EXIT_DATABASE and "Traceback" in err
    assert "check that the folder" in err


def test_a_bad_revision_and_an_unconfirmed_downgrade(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, clean: Path
) -> None:
    monkeypatch.setenv("FLOTILLA_DATABASE_URL", f"sqlite+aiosqlite:///{clean}/f.db")
    code, _, err = run(capsys, "db", "upgrade", "nosuch")
    assert code == EXIT_USAGE and "cannot upgrade to 'nosuch'" in err
    no_traceback(err)

    assert run(capsys, "db", "upgrade")[0] == EXIT_OK
    code, _, err = run(capsys, "db", "downgrade")  # stdin is not a terminal: nobody to ask
    assert code == EXIT_USAGE and "--yes" in err
    code, out, _ = run(capsys, "db", "current")
    assert code == EXIT_OK and "(empty)" not in out  # nothing was dropped

    code, out, _ = run(capsys, "db", "downgrade", "--yes")
    assert code == EXIT_OK and "revision (empty)" in out


def test_run_without_a_token_refuses_to_start(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "run")
    assert code == EXIT_CONFIG
    assert "SLACK_BOT_TOKEN is not set" in err and "SLACK_SIGNING_SECRET" in err
    no_traceback(err)


def test_check_reports_each_problem(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOTILLA_MODEL", "anthropic:claude-sonnet-4-5")
    monkeypatch.setenv("SLACK_APP_TOKEN", "xoxb-not-an-app-token")
    code, out, _ = run(capsys, "check")
    assert code == EXIT_CHECK
    assert "SLACK_BOT_TOKEN is not set" in out
    assert "SLACK_APP_TOKEN is not an app-level token" in out
    assert "set ANTHROPIC_API_KEY" in out


def test_an_unexpected_error_is_one_sentence(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(args: argparse.Namespace) -> int:
        raise RuntimeError("something nobody planned for")

    monkeypatch.setattr(cli, "_secrets_command", broken)
    code, _, err = run(capsys, "secrets", "new-key")
    assert code == EXIT_UNEXPECTED
    assert "unexpected error: RuntimeError: something nobody planned for" in err
    assert "--debug" in err
    no_traceback(err)


def test_manifest_for_http_mode_and_agent_names(capsys: pytest.CaptureFixture[str]) -> None:
    url = "https://flotilla.example.com/slack/events"
    code, out, _ = run(capsys, "manifest", "--request-url", url)
    manifest = yaml.safe_load(out)
    assert code == EXIT_OK and manifest["settings"]["socket_mode_enabled"] is False
    assert manifest["settings"]["event_subscriptions"]["request_url"] == url
    assert manifest["settings"]["interactivity"]["request_url"] == url
    assert [c["url"] for c in manifest["features"]["slash_commands"]] == [url]

    code, _, err = run(capsys, "manifest", "--request-url", "http://insecure/slack/events")
    assert code == EXIT_USAGE and "https://" in err
    code, _, err = run(capsys, "manifest", "--agent", "Research Bot")
    assert code == EXIT_USAGE and "lowercase letters" in err


def test_dev_uses_the_database_of_dotenv(clean: Path) -> None:
    assert dev_database_url(load_settings()) == cli.DEV_DATABASE
    url = f"sqlite+aiosqlite:///{clean}/from-dotenv.db"
    (clean / ".env").write_text(f"FLOTILLA_DATABASE_URL={url}\n")
    assert dev_database_url(load_settings()) == url


def test_an_unreadable_dotenv_is_a_sentence(
    capsys: pytest.CaptureFixture[str], clean: Path
) -> None:
    (clean / ".env").write_bytes(b"FLOTILLA_MODEL=\xff\xfe\n")
    code, _, err = run(capsys, "demo")
    assert code == EXIT_CONFIG and "cannot read the .env file" in err and "UTF-8" in err
    no_traceback(err)


def test_a_mistyped_setting_is_a_warning_with_the_closest_name(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, clean: Path
) -> None:
    monkeypatch.setenv("FLOTILLA_HTTP_PROT", "3001")
    (clean / ".env").write_text("FLOTILLA_MODLE=openai:gpt-4.1\n")
    code, out, err = run(capsys, "db", "current")
    assert code == EXIT_OK and "no database yet" in out  # a warning, not a stop
    assert "FLOTILLA_HTTP_PROT (in the environment) is not a Flotilla setting" in err
    assert "did you mean FLOTILLA_HTTP_PORT?" in err
    assert "FLOTILLA_MODLE (in .env) is not a Flotilla setting" in err
    assert "did you mean FLOTILLA_MODEL?" in err


def test_a_port_out_of_range_is_a_configuration_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOTILLA_HTTP_PORT", "99999")
    code, _, err = run(capsys, "run")
    assert code == EXIT_CONFIG  # it was "unexpected error: OverflowError … report it"
    assert "FLOTILLA_HTTP_PORT: Input should be less than or equal to 65535" in err
    assert "unexpected" not in err
    no_traceback(err)


def test_the_help_names_the_readme_section_that_lists_the_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys)
    assert code == EXIT_OK and "(README: Configuration)" in out
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "\n## Configuration\n" in readme


def test_allow_model_errors_from_the_command_line_or_the_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from flotilla.bot import serve
    from flotilla.bot.settings import Settings

    seen: list[bool] = []

    async def serving(settings: Settings) -> None:
        seen.append(settings.allow_model_errors)

    monkeypatch.setattr(serve, "run", serving)
    assert run(capsys, "run")[0] == EXIT_OK
    assert run(capsys, "run", "--allow-model-errors")[0] == EXIT_OK
    monkeypatch.setenv("FLOTILLA_ALLOW_MODEL_ERRORS", "true")
    assert run(capsys, "run")[0] == EXIT_OK
    assert seen == [False, True, True]
