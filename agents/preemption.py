"""A run asked to pause for urgent work stops at its next model-turn boundary.

The job running a step sets `PAUSE` (an event) for its task; the scheduler asks through
the run request's row, which the job's heartbeat reads; the session checks the event
right after it stored the history (`RunSession.drive`) and raises `Preempted` there, so
nothing paid for is lost and the resumed run sends the stored history on.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

PAUSE: ContextVar[asyncio.Event | None] = ContextVar("flotilla_pause", default=None)


class Preempted(asyncio.CancelledError):
    """The run paused at a model-turn boundary for urgent work (its history is stored).

    A `CancelledError`, so no `except Exception` on the way treats it as a failure."""


def check_pause() -> None:
    """Raise `Preempted` when this run was asked to pause (call at a turn boundary)."""
    event = PAUSE.get()
    if event is not None and event.is_set():
        raise Preempted("paused for urgent work")
