from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from flotilla.bot.cli import EXIT_DATABASE, EXIT_OK, main
from flotilla.storage.migrate import head_revision
from tests.conftest import postgres_url


def test_db_upgrade_current_downgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLOTILLA_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'ops.db'}")
    assert main(["db", "current"]) == EXIT_OK
    out = capsys.readouterr().out
    assert f"there is no database yet: {tmp_path / 'ops.db'} does not exist" in out
    assert "`flotilla db upgrade`" in out and f"(head: {head_revision()})" in out
    assert not (tmp_path / "ops.db").exists()  # asking for the revision creates nothing
    assert main(["db", "downgrade", "--yes"]) == 0  # nothing to take down: nothing created
    assert "no database yet" in capsys.readouterr().out
    assert not (tmp_path / "ops.db").exists()
    assert main(["db", "upgrade"]) == 0
    assert f"revision {head_revision()}" in capsys.readouterr().out
    assert (tmp_path / "ops.db").exists()
    assert main(["db", "downgrade", "--yes"]) == 0  # to base: asks first without --yes
    assert "revision (empty)" in capsys.readouterr().out


def test_unknown_command_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["launch-rockets"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("change", "says", "fix"),
    [
        (
            {"database": "flotilla_no_such_database"},
            'database "flotilla_no_such_database" does not exist',
            "create the database (`createdb flotilla_no_such_database`",
        ),
        (
            {"username": "flotilla_no_such_role", "password": None},
            'role "flotilla_no_such_role" does not exist',
            "create the role (CREATE ROLE flotilla_no_such_role LOGIN",
        ),
        ({"port": 1}, "Connect call failed", "check the host, the port and that PostgreSQL"),
    ],
)
def test_a_missing_database_or_role_is_told_from_a_server_that_does_not_answer(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, Any],
    says: str,
    fix: str,
) -> None:
    url = make_url(postgres_url()).set(**change)
    monkeypatch.setenv("FLOTILLA_DATABASE_URL", url.render_as_string(hide_password=False))
    assert main(["db", "current"]) == EXIT_DATABASE
    err = capsys.readouterr().err
    assert says in err and fix in err, err
    if "port" not in change:  # the server answered: its host and port are not the problem
        assert "check the host, the port" not in err
