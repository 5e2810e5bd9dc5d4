"""Background work of one process: agent runs and commander turns, one task per key."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from prometheus_client import Gauge

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Jobs:
    """Background work (agent runs, commander turns), one task per key at a time."""

    tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    running: Gauge | None = None

    def start(self, key: str, work: Callable[[], Awaitable[None]]) -> bool:
        """Start `work` unless a job with this key is running here; True when started."""
        running = self.tasks.get(key)
        if running is not None and not running.done():
            return False

        async def guarded() -> None:
            if self.running is not None:
                self.running.inc()
            try:
                await work()
            except asyncio.CancelledError:
                raise
            except Exception:  # a job's failure must not vanish silently
                log.exception("job %s failed", key)
            finally:
                self.tasks.pop(key, None)
                if self.running is not None:
                    self.running.dec()

        self.tasks[key] = asyncio.create_task(guarded(), name=key)
        return True

    async def idle(self) -> None:
        """Wait until no job is running (jobs may start jobs)."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks.values()), return_exceptions=True)

    async def cancel(self) -> None:
        for task in list(self.tasks.values()):
            task.cancel()
        await asyncio.gather(*list(self.tasks.values()), return_exceptions=True)
        self.tasks.clear()
