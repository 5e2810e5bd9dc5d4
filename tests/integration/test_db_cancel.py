"""A unit of work cancelled while its statement runs (a job stopped by a plan's cancel or
the process's stop, in the middle of a write) must not keep SQLite's write lock.

SQLAlchemy closes such a connection without a rollback (it may be mid-operation), and
Python's `close` leaves a connection whose statement is still active open until that
statement is finalized – with its transaction and the lock. The connections roll back as
they close (`storage.db.RollbackOnClose`)."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event, text

from flotilla.storage.db import Database

# a statement the driver's thread is busy with for a while (counted, not timed)
SLOW = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) "
    "SELECT count(*) FROM c"
)


async def test_a_write_cancelled_mid_statement_leaves_no_lock_and_no_row(
    sqlite_db: Database,
) -> None:
    db = sqlite_db
    async with db.write() as conn:
        await conn.execute(text("CREATE TABLE written (x INTEGER)"))
    running = asyncio.Event()

    def sent(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if statement == SLOW:
            running.set()  # the statement is on the driver's thread as the task goes on

    async def unit() -> None:
        async with db.write() as conn:
            await conn.execute(text("INSERT INTO written VALUES (1)"))
            await conn.execute(text(SLOW))

    event.listen(db.engine.sync_engine, "before_cursor_execute", sent)
    task = asyncio.create_task(unit())
    await running.wait()
    task.cancel()
    outcome = await asyncio.gather(task, return_exceptions=True)  # its traceback kept
    assert isinstance(outcome[0], asyncio.CancelledError)
    async with asyncio.timeout(10):  # the busy timeout is 30 s: a lock kept fails this
        async with db.write() as conn:
            await conn.execute(text("INSERT INTO written VALUES (2)"))
    async with db.read() as conn:
        assert (await conn.execute(text("SELECT x FROM written"))).scalars().all() == [2]
