"""The worker threads that SQLite's one-hop transactions run on (`storage/locks.py`).

`await on_worker(fn, *args)` runs `fn(*args)` on one of the process's worker threads, in a
copy of the caller's context, and returns what it returned or raises what it raised – what
`asyncio.to_thread` does, without its layers: a `concurrent.futures.Future` with its
condition variable, the executor's semaphore, `wrap_future`'s two futures chained by
callbacks. Here the worker hands the outcome to the caller's loop with one
`call_soon_threadsafe`. Counted under callgrind (a hop to a function that does nothing,
both threads): ~170,000 instructions a hop through `to_thread`, ~62,000 this way.

Threads are started on demand when no worker is idle, up to `MAX_WORKERS` (the default
executor's bound, min(32, CPUs + 4)); beyond it, jobs wait in the queue, in order. They
are daemon threads shared by every event loop of the process and wait for the next job
between jobs. As with `to_thread`, a cancelled caller stops waiting while a job already
started runs to its end (its transaction commits or rolls back), its outcome dropped. One
difference: `asyncio.run` joined the default executor's threads before it returned; nothing
waits for these, so a job still running when the process exits is cut as a crash cuts it
(its transaction never commits) – after its caller was cancelled, who could not have known
either way.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Any, TypeVar

T = TypeVar("T")

MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)

_Job = tuple[
    contextvars.Context, Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, Any
]


class WorkerThreads:
    """A queue of jobs and the threads that take them (see the module docstring)."""

    def __init__(self, max_workers: int = MAX_WORKERS) -> None:
        self.max_workers = max_workers
        self._jobs: SimpleQueue[_Job] = SimpleQueue()
        self._lock = threading.Lock()  # guards the two counts below
        self._idle = 0  # workers waiting for a job (and not yet promised one)
        self._started = 0

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on a worker thread; its result (or its exception) here."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((contextvars.copy_context(), fn, args, loop, future))
        with self._lock:
            if self._idle:
                self._idle -= 1  # that worker takes this job
                start = False
            else:
                start = self._started < self.max_workers
                self._started += start
        if start:
            name = f"flotilla-sqlite-{self._started}"
            threading.Thread(target=self._work, name=name, daemon=True).start()
        return await future

    def _work(self) -> None:
        while True:
            context, fn, args, loop, future = self._jobs.get()
            result: Any = None
            error: BaseException | None = None
            try:
                result = context.run(fn, *args)
            except BaseException as exc:  # handed to the caller, as to_thread does
                error = exc
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:  # the caller's loop is closed: nobody waits any more
                pass
            del context, fn, args, loop, future, result, error  # nothing held while idle
            with self._lock:
                self._idle += 1


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the caller's loop: the job's outcome, unless the caller stopped waiting."""
    if future.done():  # cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


_workers = WorkerThreads()


async def on_worker(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` on one of the process's worker threads (see the module docstring)."""
    return await _workers.run(fn, *args)
