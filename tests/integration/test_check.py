"""`flotilla check` against the local Slack workspace: tokens, scopes and the mode."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from flotilla.bot.check import check_slack, render
from flotilla.bot.cli import EXIT_OK, main
from flotilla.bot.manifest import commander_manifest
from flotilla.bot.settings import Settings
from flotilla.local_slack import LocalWorkspace


@pytest.fixture
async def workspace() -> AsyncIterator[LocalWorkspace]:
    ws = LocalWorkspace()
    await ws.start("127.0.0.1", 0)
    yield ws
    await ws.stop()


def settings_for(ws: LocalWorkspace, **values: object) -> Settings:
    return Settings.model_validate({"SLACK_API_URL": ws.api_url, **values})


async def test_a_token_with_the_manifest_scopes_in_each_mode(workspace: LocalWorkspace) -> None:
    http = workspace.install_manifest(commander_manifest(), socket_mode=False)
    findings = await check_slack(
        settings_for(
            workspace, SLACK_BOT_TOKEN=http.bot_token, SLACK_SIGNING_SECRET=http.signing_secret
        )
    )
    assert [(f.check, f.level) for f in findings] == [
        ("slack token", "ok"),
        ("slack scopes", "ok"),
        ("mode", "ok"),
    ]
    socket = workspace.install_manifest(commander_manifest(), socket_mode=True)
    assert socket.app_token is not None
    findings = await check_slack(
        settings_for(workspace, SLACK_BOT_TOKEN=socket.bot_token, SLACK_APP_TOKEN=socket.app_token)
    )
    assert [f.level for f in findings] == ["ok"] * 4 and findings[-1].check == "socket mode"


async def test_missing_scopes_a_refused_token_and_a_wrong_app_token(
    workspace: LocalWorkspace,
) -> None:
    thin = workspace.install_app("Thin", scopes=["chat:write", "app_mentions:read"])
    findings = await check_slack(
        settings_for(workspace, SLACK_BOT_TOKEN=thin.bot_token, SLACK_SIGNING_SECRET="s")
    )
    scopes = next(f for f in findings if f.check == "slack scopes")
    assert scopes.level == "error" and "users:read" in scopes.sentence
    assert "reinstall the app" in scopes.sentence

    findings = await check_slack(
        settings_for(
            workspace, SLACK_BOT_TOKEN="xoxb-1-2-not-a-token", SLACK_APP_TOKEN="xapp-1-A1-1-nope"
        )
    )
    table = render(findings)
    assert "Slack refused SLACK_BOT_TOKEN (invalid_auth)" in table
    assert "Slack refused SLACK_APP_TOKEN" in table and "2 problem(s)" in table


async def test_an_unreachable_slack_is_a_sentence(workspace: LocalWorkspace) -> None:
    settings = Settings.model_validate(
        {"SLACK_API_URL": "http://127.0.0.1:1/api/", "SLACK_BOT_TOKEN": "xoxb-1"}
    )
    [token, _mode] = await check_slack(settings)
    assert (
        token.level == "error" and "cannot reach Slack at http://127.0.0.1:1/api/" in token.sentence
    )


def test_check_local_passes_with_the_offline_model(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLOTILLA_MODEL", raising=False)
    assert main(["check", "--local"]) == EXIT_OK
    out = capsys.readouterr().out
    for check in ("slack token", "slack scopes", "mode", "database", "model"):
        assert check in out
    assert out.strip().endswith("all checks passed") and "offline answered" in out
    assert "xoxb-" not in out  # no token is printed


async def test_an_app_installed_by_the_standalone_workspace_has_every_scope_flotilla_needs(
    workspace: LocalWorkspace,
) -> None:
    """`python -m flotilla.local_slack --app NAME=URL` installs with ALL_SCOPES: `flotilla
    run` against it must not refuse for a missing scope (it did for files:read/write)."""
    from flotilla.local_slack.__main__ import ALL_SCOPES

    app = workspace.install_app("Flotilla", scopes=ALL_SCOPES)
    findings = await check_slack(
        settings_for(workspace, SLACK_BOT_TOKEN=app.bot_token, SLACK_SIGNING_SECRET="s")
    )
    scopes = next(f for f in findings if f.check == "slack scopes")
    assert scopes.level == "ok", scopes.sentence
    assert set(commander_manifest()["oauth_config"]["scopes"]["bot"]) <= set(ALL_SCOPES)


async def test_a_missing_sqlite_file_is_not_created_by_the_check(
    workspace: LocalWorkspace, tmp_path: Path
) -> None:
    from flotilla.bot.check import check_database

    path = tmp_path / "flotilla.db"
    settings = settings_for(workspace, FLOTILLA_DATABASE_URL=f"sqlite+aiosqlite:///{path}")
    [finding] = await check_database(settings)
    assert finding.level == "warning" and "there is no database yet" in finding.sentence
    assert "`flotilla run`" in finding.sentence and not path.exists()
