"""Benchmark: how long `flotilla run` takes to answer /healthz, beside `import slack_bolt`.

Each sample is a fresh interpreter. `flotilla run` is started in HTTP mode against a local
Slack workspace (started here, in this process) with the offline model and a SQLite file
that is already migrated (a restart, the common case); the clock runs from the spawn
until /healthz first answers 200 (liveness: the HTTP surface is up, the rest still loads),
and on until /readyz first answers 200 (the start-up checks – auth.test, the database, one
offline model request – passed and the service runs). Prints the medians side by side and
the ratio of /healthz to `import slack_bolt`.

    .venv/bin/python bench/startup.py            # 7 samples each
    .venv/bin/python bench/startup.py --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flotilla.bot.manifest import commander_manifest  # noqa: E402
from flotilla.local_slack import LocalWorkspace  # noqa: E402
from tests.e2e.flotilla_process import free_port  # noqa: E402


def import_slack_bolt() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import slack_bolt"], check=True)
    return time.perf_counter() - started


async def answers(url: str, process: asyncio.subprocess.Process) -> None:
    """Poll `url` until it answers 200 (this is the measurement, not a test's wait)."""
    async with aiohttp.ClientSession() as session:
        while process.returncode is None:
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.005)
    raise RuntimeError(f"flotilla run ended before {url} answered")


async def flotilla_run(env: dict[str, str], folder: Path) -> tuple[float, float]:
    port = free_port()
    env = {**env, "FLOTILLA_HTTP_PORT": str(port)}
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "flotilla.bot.cli",
        "run",
        cwd=folder,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await asyncio.wait_for(answers(f"http://127.0.0.1:{port}/healthz", process), 60)
        live = time.perf_counter() - started
        await asyncio.wait_for(answers(f"http://127.0.0.1:{port}/readyz", process), 60)
        return live, time.perf_counter() - started
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        await process.wait()


async def main(runs: int) -> None:
    workspace = LocalWorkspace()
    await workspace.start("127.0.0.1", 0)
    app = workspace.install_manifest(commander_manifest(), socket_mode=False)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOTILLA_", "SLACK_"))}
        env.update(
            PYTHONPATH=str(ROOT),
            SLACK_BOT_TOKEN=app.bot_token,
            SLACK_SIGNING_SECRET=app.signing_secret,
            SLACK_API_URL=workspace.api_url,
            FLOTILLA_DATABASE_URL=f"sqlite+aiosqlite:///{folder / 'bench.db'}",
            FLOTILLA_HTTP_HOST="127.0.0.1",
            FLOTILLA_LOG_LEVEL="WARNING",
        )
        await flotilla_run(env, folder)  # migrates the database; not counted
        bolt = [import_slack_bolt() for _ in range(runs)]
        both = [await flotilla_run(env, folder) for _ in range(runs)]
    await workspace.stop()
    live, ready = [b[0] for b in both], [b[1] for b in both]
    print(f"{'':34}{'median':>9}{'min':>9}{'max':>9}   ({runs} runs each)")
    for label, samples in (
        ('python -c "import slack_bolt"', bolt),
        ("flotilla run -> /healthz 200", live),
        ("flotilla run -> /readyz 200", ready),
    ):
        median, low, high = statistics.median(samples), min(samples), max(samples)
        print(f"{label:34}{median:8.2f}s{low:8.2f}s{high:8.2f}s")
    ratio = statistics.median(live) / statistics.median(bolt)
    print(f"/healthz median / import slack_bolt median: {ratio:.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    asyncio.run(main(parser.parse_args().runs))
