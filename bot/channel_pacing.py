"""A send queue per channel: new messages in one channel at most `rate` per second sustained,
short bursts of `burst` allowed, and no channel ever waits for another.

Slack asks apps to post about one message per second per channel. Each channel has a
token bucket in its GCRA form (`ChannelBucket`, pure: times in, times out), so a burst of
plans in one channel queues its own posts (in arrival order) while every other channel posts
at once. The buckets of channels quiet for a while are dropped (bounded memory).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from flotilla.agents.core.lru import LRUCache

CHANNELS_KEPT = 10_000  # channels whose bucket is remembered (a dropped one starts full)


@dataclass
class ChannelBucket:
    """GCRA: `reserve(now)` is when the next send may go; every reservation is kept."""

    rate: float  # sends per second, sustained
    burst: int  # sends at once after a quiet spell
    tat: float = float("-inf")  # the theoretical arrival time of the next send

    def reserve(self, now: float) -> float:
        """The time (>= now) at which one more send may go, reserved for the caller."""
        interval = 1.0 / self.rate
        tolerance = (self.burst - 1) * interval
        tat = max(self.tat, now)
        earliest = tat - tolerance
        at = now if earliest <= now + 1e-9 else earliest  # float noise is no reason to wait
        self.tat = max(tat, at) + interval
        return at


class ChannelPacer:
    """Waits, per channel, until a new message may be sent (`rate` None: never waits)."""

    def __init__(
        self,
        rate: float | None,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.rate, self.burst, self.clock, self.sleep = rate, max(1, burst), clock, sleep
        self._buckets: LRUCache[str, ChannelBucket] = LRUCache(CHANNELS_KEPT)
        # (channel, time granted, seconds waited) of the last sends, for tests and benchmarks
        self.granted: list[tuple[str, float, float]] = []

    async def wait(self, channel: str) -> float:
        """Wait for `channel`'s next slot; the seconds waited."""
        if self.rate is None:
            return 0.0
        bucket = self._buckets.get(channel)
        if bucket is None:
            bucket = ChannelBucket(self.rate, self.burst)
            self._buckets.put(channel, bucket)
        now = self.clock()
        at = bucket.reserve(now)
        if at > now:
            await self.sleep(at - now)
        self.granted.append((channel, at, at - now))
        del self.granted[:-1000]
        return at - now
