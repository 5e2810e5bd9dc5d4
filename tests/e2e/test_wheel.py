"""The package as a user gets it: build the wheel, install it into a fresh virtual
environment, and run `flotilla manifest` and `flotilla demo` from it, away from the source
tree.

Nothing comes from the package index: the wheel is built with the build backend of this
environment (`--no-build-isolation`), and the fresh environment finds the wheel's
dependencies in this one (a `.pth` line, added after the wheel is installed). `.ci/run`
does the same with the index: an isolated build, and the dependencies pip resolves."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
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


def requirements(wheel: Path) -> list[str]:
    """The wheel's `Requires-Dist` lines."""
    with zipfile.ZipFile(wheel) as archive:
        [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(metadata).decode().splitlines()
    return [
        line.removeprefix("Requires-Dist: ") for line in lines if line.startswith("Requires-Dist:")
    ]


def test_the_wheel_installs_and_runs_from_a_fresh_venv(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOTILLA_", "SLACK_"))}
    env.pop("PYTHONPATH", None)
    env["PIP_NO_INDEX"] = "1"  # never the package index
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip"]
    run(
        *pip,
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        wheels,
        ROOT,
        cwd=tmp_path,
        env=env,
    )
    [wheel] = wheels.glob("flotilla-*.whl")
    assert top_level_names(wheel) == {"flotilla"}
    # the MCP client is an extra: a plain install does not bring it
    mcp = [r for r in requirements(wheel) if r.startswith("pydantic-ai-slim[mcp]")]
    assert mcp and all('extra == "mcp"' in r for r in mcp)

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path, env=env)
    python = venv / "bin/python"
    run(*pip, "--python", python, "install", "-q", "--no-deps", wheel, cwd=tmp_path, env=env)
    fresh = run(
        python,
        "-c",
        "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        cwd=tmp_path,
        env=env,
    )
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(fresh.strip()) / "dependencies.pth").write_text("\n".join(sorted(ours)) + "\n")

    elsewhere = tmp_path / "elsewhere"  # no source tree, no .env around
    elsewhere.mkdir()
    flotilla = venv / "bin/flotilla"
    manifest = yaml.safe_load(run(flotilla, "manifest", cwd=elsewhere, env=env))
    assert manifest["settings"]["socket_mode_enabled"] is True
    assert "chat:write" in manifest["oauth_config"]["scopes"]["bot"]
    located = run(
        python,
        "-c",
        "import flotilla.bot as b; print(b.__file__)",
        cwd=elsewhere,
        env=env,
    )
    assert str(venv) in located  # the installed package, not the checkout

    thread = run(flotilla, "demo", cwd=elsewhere, env=env)
    assert "[offline model]" in thread and "Flotilla" in thread
