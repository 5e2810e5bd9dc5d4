from __future__ import annotations

from pathlib import Path

import pytest

from flotilla.bot.cli import main
from flotilla.storage.migrate import head_revision


def test_db_upgrade_current_downgrade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLOTILLA_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path / 'ops.db'}")
    assert main(["db", "current"]) == 0
    assert "revision (empty)" in capsys.readouterr().out
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
