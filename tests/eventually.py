"""The one way an end-to-end or integration test awaits a condition nothing signals (a row
in the shared database, another process's state): look at it every few milliseconds until
it holds, and fail after `timeout` seconds saying what was awaited.

A condition is awaited, never a sleep's length guessed. Where something does signal – the
local workspace's state (`Driver.wait_for`, `Driver.thread_has_message`), an
`asyncio.Event` a fake sets – await that instead.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")

TIMEOUT = 20.0  # seconds: a bound on a hung test, never a wait in itself
EVERY = 0.02  # seconds between two looks


@overload
async def eventually(
    condition: Callable[[], Awaitable[T | None]],
    timeout: float = TIMEOUT,
    *,
    what: str,
    every: float = EVERY,
) -> T: ...


@overload
async def eventually(
    condition: Callable[[], T | None],
    timeout: float = TIMEOUT,
    *,
    what: str,
    every: float = EVERY,
) -> T: ...


async def eventually(
    condition: Callable[[], object],
    timeout: float = TIMEOUT,
    *,
    what: str,
    every: float = EVERY,
) -> object:
    """The first truthy value of `condition()` (a sync or an async predicate, looked at
    every `every` seconds); an AssertionError naming `what` (and the last value seen) when
    none came within `timeout` seconds – a look that hangs counts against the timeout."""
    last: object = None
    limit = asyncio.timeout(timeout)
    try:
        async with limit:
            while True:
                got = condition()
                last = (await got) if inspect.isawaitable(got) else got
                if last:
                    return last
                await asyncio.sleep(every)
    except TimeoutError:
        if not limit.expired():
            raise  # the condition's own timeout, not ours
        shown = repr(last)
        shown = shown if len(shown) <= 300 else shown[:300] + "…"
        raise AssertionError(f"not within {timeout:g} s: {what} (last seen: {shown})") from None
