"""How an experiment runs: mentions sent at random moments over a window while a chaos task
does its harm, then a bounded wait for every plan to finish (or be told it stopped)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from bench.chaos.measure import resolved
from bench.chaos.stack import Stack


@dataclass(frozen=True)
class Window:
    plans: int  # mentions to send
    seconds: float  # spread over this long
    drain: float  # then wait at most this long for the plans to finish


async def feed(stack: Stack, window: Window, rng: random.Random) -> None:
    """Send `window.plans` mentions at random moments within `window.seconds`."""
    start = time.monotonic()
    moments = sorted(rng.uniform(0, window.seconds) for _ in range(window.plans))
    for moment in moments:
        await asyncio.sleep(max(0.0, start + moment - time.monotonic()))
        stack.mention()


async def drain(stack: Stack, timeout: float) -> float:
    """Wait (bounded) until every mention's plan has finished; the seconds it took."""
    start = time.monotonic()
    with contextlib.suppress(TimeoutError):
        await stack.workspace.state.wait_for(
            lambda: all(resolved(stack, m) for m in stack.mentions), timeout
        )
    return time.monotonic() - start


async def under_chaos(
    stack: Stack,
    window: Window,
    rng: random.Random,
    chaos: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
) -> float:
    """Feed mentions while `chaos(stop)` runs; stop it; heal; drain. The drain's seconds."""
    stop = asyncio.Event()
    harm = asyncio.create_task(chaos(stop))
    try:
        await feed(stack, window, rng)
    finally:
        stop.set()
        await harm
    return await drain(stack, window.drain)


async def pause(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep `seconds` unless stopped first; True when stopped."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
