"""The package as a user gets it: build the wheel, install it into a fresh virtual
environment (dependencies from the package index pip is configured with), and run
`flotilla manifest` and `flotilla demo` from it, away from the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def run(*command: str | Path, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr
    return done.stdout


def top_level_names(wheel: Path) -> set[str]:
    """The names a wheel's files add at the top of site-packages (its .dist-info aside)."""
    with zipfile.ZipFile(wheel) as archive:
        names = {name.split("/")[0] for name in archive.namelist()}
    return {name.removesuffix(".py") for name in names if not name.endswith(".dist-info")}


def test_the_wheel_installs_and_runs_from_a_fresh_venv(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOTILLA_", "SLACK_"))}
    env.pop("PYTHONPATH", None)
    wheels = tmp_path / "wheels"
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        wheels,
        ROOT,
        cwd=tmp_path,
        env=env,
    )
    [wheel] = wheels.glob("flotilla-*.whl")
    assert top_level_names(wheel) == {"flotilla"}
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path, env=env)
    run(venv / "bin/python", "-m", "pip", "install", "-q", wheel, cwd=tmp_path, env=env)

    elsewhere = tmp_path / "elsewhere"  # no source tree, no .env around
    elsewhere.mkdir()
    flotilla = venv / "bin/flotilla"
    manifest = yaml.safe_load(run(flotilla, "manifest", cwd=elsewhere, env=env))
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert "chat:write" in manifest["oauth_config"]["scopes"]["bot"]
    located = run(
        venv / "bin/python",
        "-c",
        "import flotilla.bot as b; print(b.__file__)",
        cwd=elsewhere,
        env=env,
    )
    assert str(venv) in located  # the installed package, not the checkout

    thread = run(flotilla, "demo", cwd=elsewhere, env=env)
    assert "[offline model]" in thread and "Flotilla" in thread
