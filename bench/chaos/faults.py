"""Experiment 4: Slack and the model misbehave. One `flotilla run` on SQLite; the local
workspace enforces Slack's rate limits and answers a share of Web API calls with 429 on top,
and delivers every event four times; the model server fails 30 % of requests with 500, 429
or 503, or hangs and then drops the connection."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from bench.chaos.drive import Window, drain, feed
from bench.chaos.measure import Figures, format_counts, plan_figures
from bench.chaos.stack import Stack

SLACK_429_RATE = 0.15
MODEL_FAULT_RATE = 0.30
EVENT_COPIES = 4


async def slack_and_model_faults(
    folder: Path,
    window: Window,
    seed: int,
    *,
    hang_seconds: float = 5.0,
    slack_429_rate: float = SLACK_429_RATE,
    model_fault_rate: float = MODEL_FAULT_RATE,
) -> Figures:
    rng = random.Random(seed)
    stack = Stack(folder, f"sqlite+aiosqlite:///{folder / 'flotilla.db'}")
    await stack.start()
    try:
        await stack.spawn()  # the faults start once it serves (its first calls are clean)
        limiter = stack.workspace.rate_limiter
        limiter.enabled, limiter.fault_rate = True, slack_429_rate
        limiter.rng = random.Random(seed + 1)
        stack.workspace.events.duplicates = EVENT_COPIES - 1
        model = stack.model
        model.fault_rate, model.hang_seconds = model_fault_rate, hang_seconds
        model.rng = random.Random(seed + 2)

        await feed(stack, window, rng)
        drained = await drain(stack, window.drain)
        figures = Figures("Experiment 4: Slack 429s, every event delivered 4×, model faults")
        figures.notes += [
            f"{window.plans} plans over {window.seconds:g} s, then up to {window.drain:g} s "
            f"to finish (took {drained:.0f} s); seed {seed}",
            f"Slack's rate limits on, plus {slack_429_rate:.0%} of Web API calls answered 429; "
            f"model: {model_fault_rate:.0%} of requests fail (500, 429, 503, or a "
            f"{hang_seconds:g} s hang then a dropped connection); one replica on SQLite",
        ]
        plan_figures(stack, figures)
        figures.add("Slack 429s answered", len(limiter.limited))
        faults = Counter(
            "hang" if r.status == 0 else str(r.status) for r in model.requests if r.status != 200
        )
        figures.add("model faults injected", format_counts(faults))
        return figures
    finally:
        await stack.stop()
