"""Experiments 1 and 2: replicas killed with SIGKILL while plans run.

1. three `flotilla run` replicas on one (throw-away) PostgreSQL behind a round-robin proxy,
   a random replica killed every 5–15 s and a new one started in its place;
2. one replica on a SQLite file, killed at random moments and restarted each time.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from bench.chaos.drive import Window, pause, under_chaos
from bench.chaos.measure import Figures, format_counts, plan_figures, resolved, seconds
from bench.chaos.proxy import RoundRobinProxy
from bench.chaos.stack import Stack
from tests.throwaway_postgres import ThrowawayPostgres

TAKEOVER_TIMEOUT = 60.0


async def _takeovers(tasks: list[asyncio.Task[float | None]]) -> tuple[list[float], int]:
    done = await asyncio.gather(*tasks)
    measured = [t for t in done if t is not None]
    return measured, len(tasks)


async def replicas(
    folder: Path, window: Window, seed: int, kill_every: tuple[float, float]
) -> Figures:
    rng = random.Random(seed)
    postgres = ThrowawayPostgres(max_connections=200)
    await postgres.start()
    proxy = RoundRobinProxy()
    await proxy.start()
    stack = Stack(folder, postgres.url)
    stack.request_url = proxy.url
    await stack.start()
    takeovers: list[asyncio.Task[float | None]] = []
    try:
        for _ in range(3):
            proxy.backends.append((await stack.spawn()).url)

        replacements: list[asyncio.Task[None]] = []

        async def replace() -> None:  # a new replica joins the proxy once it serves
            proxy.backends.append((await stack.spawn()).url)

        async def chaos(stop: asyncio.Event) -> None:
            while not await pause(stop, rng.uniform(*kill_every)):
                serving = [p for p in stack.alive() if p.url in proxy.backends]
                if len(serving) < 2:
                    continue  # the last serving replica is spared until another serves
                victim = rng.choice(serving)
                proxy.backends.remove(victim.url)
                takeovers.append(await stack.kill(victim, TAKEOVER_TIMEOUT))
                replacements.append(asyncio.create_task(replace()))
            await asyncio.gather(*replacements)

        drained = await under_chaos(stack, window, rng, chaos)
        measured, _ = await _takeovers(takeovers)
        figures = Figures(
            "Experiment 1: three replicas on PostgreSQL, one killed every "
            f"{kill_every[0]:g}–{kill_every[1]:g} s"
        )
        figures.notes += [
            f"{window.plans} plans over {window.seconds:g} s, then up to {window.drain:g} s "
            f"to finish (took {drained:.0f} s); seed {seed}",
            "run lease 5 s, heartbeat 1 s; a throw-away PostgreSQL 15; a round-robin proxy",
        ]
        plan_figures(stack, figures)
        figures.add("replicas killed (SIGKILL)", stack.killed)
        figures.add("kill -> the killed replica's runs taken over", seconds(measured))
        figures.add("HTTP statuses the proxy answered", format_counts(proxy.statuses))
        return figures
    finally:
        await stack.stop()
        await proxy.close()
        postgres.remove()


async def sqlite_kills(
    folder: Path, window: Window, seed: int, kills: int, burst: int = 0
) -> Figures:
    """Experiment 2; with `burst`, that many mentions are sent at once first (before the kills)."""
    rng = random.Random(seed)
    stack = Stack(folder, f"sqlite+aiosqlite:///{folder / 'flotilla.db'}")
    await stack.start()
    takeovers: list[asyncio.Task[float | None]] = []
    try:
        await stack.spawn()
        burst_mentions = [stack.mention() for _ in range(burst)]

        async def chaos(stop: asyncio.Event) -> None:
            start = time.monotonic()
            for moment in sorted(rng.uniform(0, window.seconds) for _ in range(kills)):
                await asyncio.sleep(max(0.0, start + moment - time.monotonic()))
                for victim in stack.alive():
                    takeovers.append(await stack.kill(victim, TAKEOVER_TIMEOUT))
                await stack.spawn()

        drained = await under_chaos(stack, window, rng, chaos)
        measured, _ = await _takeovers(takeovers)
        figures = Figures(f"Experiment 2: one replica on SQLite, kill -9 at {kills} random moments")
        figures.notes += [
            f"{burst} mentions at once, then {window.plans} plans over {window.seconds:g} s, "
            f"then up to {window.drain:g} s to finish (took {drained:.0f} s); seed {seed}",
            "run lease 5 s, heartbeat 1 s; the killed process is restarted at once (a new "
            "owner: its old leases expire first)",
        ]
        plan_figures(stack, figures)
        figures.add("kills (SIGKILL)", stack.killed)
        if burst:
            lost = sum(not resolved(stack, m) for m in burst_mentions)
            figures.add(f"of them a burst of {burst} mentions at once: lost", lost)
        figures.add("kill -> the killed process's runs taken over", seconds(measured))
        return figures
    finally:
        await stack.stop()
