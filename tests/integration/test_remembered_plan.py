"""The plan a reconciler remembers is the one it committed last, or none: on SQLite the card
and the plan's ending take it unread (`agents/running/plan_reads.py`), so it must never be older
than what is stored."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.storage.db import Database
from tests.fakes.clock import FakeClock
from tests.integration.reconcile_support import (
    AGENTS,
    T0,
    chain,
    finish_running,
    new_conversation,
)


async def test_each_commit_is_remembered_as_stored(sqlite_db: Database) -> None:
    reconciler = Reconciler(sqlite_db, clock=FakeClock(T0))
    cid = await new_conversation(sqlite_db, "r.1")
    await reconciler.start_plan(cid, chain(3), assignees=AGENTS)
    for _ in range(3):
        assert reconciler.remembered(cid) == await reconciler.plan(cid)
        await finish_running(reconciler, cid)
    assert reconciler.remembered(cid) == await reconciler.plan(cid)
    assert (await reconciler.plan(cid)).status == "completed"  # type: ignore[union-attr]


async def test_a_commit_its_caller_never_saw_leaves_no_older_plan_remembered(
    sqlite_db: Database,
) -> None:
    """The reconcile's caller is cancelled while its transaction commits on the worker
    thread: the commit is stored but never remembered, so no plan is remembered at all
    (the one before would be older than what is stored)."""
    reconciler = Reconciler(sqlite_db, clock=FakeClock(T0))
    cid = await new_conversation(sqlite_db, "r.2")
    await reconciler.start_plan(cid, chain(3), assignees=AGENTS)
    assert reconciler.remembered(cid) is not None
    run = reconciler.locks.run

    async def committed_then_cancelled(*args: Any, **kwargs: Any) -> Any:
        await run(*args, **kwargs)
        raise asyncio.CancelledError

    reconciler.locks.run = committed_then_cancelled  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        await finish_running(reconciler, cid)
    reconciler.locks.run = run  # type: ignore[method-assign]
    stored = await reconciler.plan(cid)
    assert stored is not None and stored.step(1).status == "done"  # type: ignore[union-attr]
    assert reconciler.remembered(cid) is None


async def test_an_older_commit_remembered_late_does_not_replace_a_newer_one(
    sqlite_db: Database,
) -> None:
    reconciler = Reconciler(sqlite_db, clock=FakeClock(T0))
    cid = await new_conversation(sqlite_db, "r.3")
    await reconciler.start_plan(cid, chain(3), assignees=AGENTS)
    older = reconciler.remembered(cid)
    await finish_running(reconciler, cid)
    newer = reconciler.remembered(cid)
    assert older is not None and newer is not None and newer.version > older.version
    reconciler._remember(older)  # its coroutine resumed after the newer one's
    assert reconciler.remembered(cid) == newer
