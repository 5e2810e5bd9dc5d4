"""`agents.core.clock.woken`, the one way a background loop waits: a wake-up, its poll timing
out, and a cancellation that arrives in the same instant as the wake-up – which
`asyncio.wait_for` swallows on Python 3.11 (CPython gh-86296), so a loop waiting with it
cannot be stopped (see tests/integration/test_admission_stop.py)."""

from __future__ import annotations

import asyncio

from flotilla.agents.core.clock import woken

BOUND = 10.0  # seconds: a bound on a hung loop, never a sleep


async def test_woken_says_whether_the_event_was_set() -> None:
    event = asyncio.Event()
    assert await woken(event, 0.0) is False
    event.set()
    assert await woken(event, 3600.0) is True


async def test_a_loop_cancelled_as_it_is_woken_ends() -> None:
    event = asyncio.Event()
    waiting = asyncio.Event()
    rounds = 0

    async def forever() -> None:
        nonlocal rounds
        while True:
            event.clear()
            rounds += 1
            waiting.set()
            await woken(event, 3600.0)

    task = asyncio.create_task(forever())
    await waiting.wait()  # the loop is now inside woken, waiting for the event
    event.set()
    task.cancel()  # the same instant
    async with asyncio.timeout(BOUND):
        await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert rounds == 1
