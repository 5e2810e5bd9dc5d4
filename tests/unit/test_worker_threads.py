"""The worker threads of SQLite's transactions answer as `asyncio.to_thread` does: the
result or the exception, in the caller's context, on another thread; a cancelled caller
stops waiting while the job runs to its end; jobs beyond the threads wait their turn."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from flotilla.storage.worker_threads import WorkerThreads, on_worker

TAG: contextvars.ContextVar[str] = contextvars.ContextVar("tag", default="none")


async def test_a_job_runs_on_another_thread_in_the_callers_context() -> None:
    TAG.set("caller's")
    here = threading.get_ident()
    seen = await on_worker(lambda a, b: (threading.get_ident(), TAG.get(), a + b), 2, 3)
    assert seen[0] != here
    assert seen[1:] == ("caller's", 5)


async def test_a_jobs_exception_is_raised_to_the_caller() -> None:
    def fails() -> None:
        raise LookupError("gone")

    with pytest.raises(LookupError, match="gone"):
        await on_worker(fails)
    assert await on_worker(lambda: "still serving") == "still serving"


async def test_a_cancelled_caller_stops_waiting_and_the_job_runs_to_its_end() -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def job() -> str:
        started.set()
        release.wait(10)
        finished.set()
        return "done"

    waiting = asyncio.create_task(on_worker(job))
    assert await asyncio.to_thread(started.wait, 10)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    release.set()
    assert await asyncio.to_thread(finished.wait, 10)
    assert await on_worker(lambda: "next") == "next"


async def test_jobs_beyond_the_threads_wait_their_turn() -> None:
    workers = WorkerThreads(max_workers=2)
    both = threading.Barrier(2, timeout=10)  # the first two jobs run side by side
    names: list[str] = []

    def job(n: int) -> int:
        if n < 2:
            both.wait()
        names.append(threading.current_thread().name)
        return n

    assert await asyncio.gather(*(workers.run(job, n) for n in range(5))) == [0, 1, 2, 3, 4]
    assert len(set(names)) == 2  # two threads took the five jobs
