"""Experiment 3: the database goes away. One `flotilla run` on a throw-away PostgreSQL that
is stopped (fast shutdown: connections cut) every 5–20 s for a few seconds and started
again, while mentions keep arriving – some of them during the outages."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from bench.chaos.drive import Window, pause, under_chaos
from bench.chaos.measure import Figures, acked, plan_figures, resolved
from bench.chaos.stack import Stack
from tests.throwaway_postgres import ThrowawayPostgres

OUTAGE = (2.0, 6.0)  # seconds the database stays down each time


async def postgres_outages(
    folder: Path, window: Window, seed: int, every: tuple[float, float]
) -> Figures:
    rng = random.Random(seed)
    postgres = ThrowawayPostgres(max_connections=200)
    await postgres.start()
    stack = Stack(folder, postgres.url)
    await stack.start()
    outages: list[tuple[float, float]] = []
    restarts = 0
    try:
        await stack.spawn()

        async def chaos(stop: asyncio.Event) -> None:
            nonlocal restarts
            while not await pause(stop, rng.uniform(*every)):
                down = time.monotonic()
                await postgres.stop("fast")
                await asyncio.sleep(rng.uniform(*OUTAGE))
                await postgres.start()
                outages.append((down, time.monotonic()))
                restarts += await _restart_exited(stack)

        drained = await under_chaos(stack, window, rng, chaos)
        restarts += await _restart_exited(stack)
        during = [m for m in stack.mentions if any(a <= m.sent <= b for a, b in outages)]
        figures = Figures(
            f"Experiment 3: PostgreSQL stopped and started every {every[0]:g}–{every[1]:g} s"
        )
        figures.notes += [
            f"{window.plans} plans over {window.seconds:g} s, then up to {window.drain:g} s "
            f"to finish (took {drained:.0f} s); seed {seed}",
            f"one replica; outages of {OUTAGE[0]:g}–{OUTAGE[1]:g} s (pg_ctl stop -m fast); "
            "run lease 5 s, heartbeat 1 s",
        ]
        plan_figures(stack, figures)
        figures.add("database outages", len(outages))
        figures.add(
            "mentions sent during an outage: lost / sent",
            f"{sum(not resolved(stack, m) for m in during)} / {len(during)} "
            f"({sum(acked(stack, m) for m in during)} acked)",
        )
        figures.add("flotilla processes that exited and were restarted", restarts)
        return figures
    finally:
        await stack.stop()
        postgres.remove()


async def _restart_exited(stack: Stack) -> int:
    """Like a supervisor (systemd's Restart=always): start a new process for one that exited."""
    if stack.alive():
        return 0
    await stack.spawn()
    return 1
