"""Slack's Web API rate limits: per-method tiers per app, and chat.postMessage about one
message per second per channel with short bursts. Off by default; answers are HTTP 429 with
`Retry-After` (whole seconds), as Slack sends them.

For chaos tests, `fault_rate` answers that share of calls (drawn from `rng`, methods in
`exempt` excepted) with a 429 of `Retry-After: 1` whatever the buckets say.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

# Requests per minute of each tier (docs.slack.dev/apis/web-api/rate-limits).
TIER_PER_MINUTE = {"t1": 1, "t2": 20, "t3": 50, "t4": 100, "t5": 600}
METHOD_TIERS = {
    "auth.test": "t5",
    "chat.postMessage": "t5",
    "chat.update": "t3",
    "chat.delete": "t3",
    "chat.postEphemeral": "t4",
    "conversations.replies": "t3",
    "conversations.history": "t3",
    "conversations.info": "t3",
    "conversations.members": "t4",
    "users.info": "t4",
    "views.open": "t4",
    "views.update": "t4",
    "views.push": "t4",
    "views.publish": "t4",
    "chat.startStream": "t2",
    "chat.appendStream": "t4",
    "chat.stopStream": "t2",
    "agents.sessions.setStatus": "t3",
    "assistant.threads.setStatus": "t5",
    "conversations.open": "t3",
    "apps.connections.open": "t1",
}


@dataclass
class _Bucket:
    """A token bucket: `capacity` requests at once, refilled at `rate` per second."""

    capacity: float
    rate: float
    tokens: float
    updated: float

    def take(self, now: float) -> float:
        """Take one token; answer 0 when allowed, else the seconds until one is free."""
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class RateLimiter:
    """Decides whether a call may proceed; `retry_after()` is None when it may."""

    def __init__(
        self,
        *,
        enabled: bool = False,
        channel_burst: int = 3,
        clock: Callable[[], float] = time.monotonic,
        fault_rate: float = 0.0,
        rng: random.Random | None = None,
        exempt: frozenset[str] = frozenset(),
    ) -> None:
        self.enabled = enabled
        self.fault_rate = fault_rate
        self.rng = rng or random.Random(0)
        self.exempt = exempt
        self.channel_burst = channel_burst
        self.clock = clock
        self.limited: list[tuple[str, str]] = []  # (method, key) of every 429 answered
        self._buckets: dict[tuple[str, ...], _Bucket] = {}

    def _bucket(self, key: tuple[str, ...], capacity: float, rate: float) -> _Bucket:
        if key not in self._buckets:
            self._buckets[key] = _Bucket(capacity, rate, capacity, self.clock())
        return self._buckets[key]

    def retry_after(self, method: str, app_id: str, channel: str | None) -> int | None:
        if self.fault_rate and method not in self.exempt and self.rng.random() < self.fault_rate:
            self.limited.append((method, channel or app_id))
            return 1
        if not self.enabled:
            return None
        now = self.clock()
        per_minute = TIER_PER_MINUTE[METHOD_TIERS.get(method, "t3")]
        # Slack tolerates bursts within a tier; allow up to a minute's worth at once.
        wait = self._bucket(("m", app_id, method), per_minute, per_minute / 60).take(now)
        if method == "chat.postMessage" and channel and wait == 0:
            bucket = self._bucket(("c", app_id, channel), self.channel_burst, 1.0)
            wait = bucket.take(now)
        if wait == 0:
            return None
        self.limited.append((method, channel or app_id))
        return max(1, math.ceil(wait))
