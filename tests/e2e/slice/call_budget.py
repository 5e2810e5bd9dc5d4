"""Counting a plan's Web API calls the way `bench/live.py` does: by method, a streamed
message (start, appends, stop) as one call, the status calls left out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

STATUS_CALLS = frozenset({"agents.sessions.setStatus", "assistant.threads.setStatus"})
STREAM_REST = frozenset({"chat.appendStream", "chat.stopStream"})  # a stream counts at its start
LEFT_OUT = STATUS_CALLS | STREAM_REST


def counted_calls(api_log: Iterable[tuple[str, str]]) -> Counter[str]:
    """The counted calls of a workspace's API log (method -> how many), failed ones too."""
    return Counter(method for method, _outcome in api_log if method not in LEFT_OUT)


def per_step(calls: Counter[str], steps: int) -> float:
    return sum(calls.values()) / steps
