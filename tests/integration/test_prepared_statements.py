"""The reconcile's hot statements run on SQLite's DBAPI cursor (`storage/prepared.py`) store
exactly what SQLAlchemy's execution of the same statements stores: the same scenario run
both ways leaves byte-identical rows (JSON text, timestamps, NULLs, defaults)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from flotilla.agents.planning.plan import Outcome, StepBlocked, StepFailed, StepSucceeded
from flotilla.agents.reconciling.outbox import OutboxSender
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.storage.db import Database
from flotilla.storage.locks import run_transaction
from flotilla.storage.migrate import upgrade
from flotilla.storage.outbox import enqueue_effects
from flotilla.storage.outbox_marks import mark_sent
from flotilla.storage.plan_steps import update_steps
from flotilla.storage.plans import load_latest_plan
from flotilla.storage.prepared import Prepared
from flotilla.storage.sql import ConcurrentPlanChange
from tests.db_counts import counting
from tests.fakes.clock import FakeClock
from tests.integration.reconcile_support import (
    AGENTS,
    T0,
    RecordingPort,
    diamond,
    new_conversation,
    outbox_keys,
)

TABLES = ("plans", "plan_steps", "outbox", "processed_events")


async def _scenario(
    path: Path, after_start: Callable[[], None] = lambda: None
) -> dict[str, list[tuple[object, ...]]]:
    """A diamond through a transient failure, its retry, files, a blocked step, a repeated
    event and the end, with the sender wired (rows handed over and marked sent);
    `after_start` called once the plan is stored."""
    db = Database(f"sqlite+aiosqlite:///{path}")
    await upgrade(db)
    clock = FakeClock(T0)
    sender = OutboxSender(db, RecordingPort(), clock=clock)
    reconciler = Reconciler(db, clock=clock, outbox=sender)
    cid = await new_conversation(db, "t")
    await reconciler.start_plan(cid, diamond(), assignees=AGENTS, max_parallel=2)
    after_start()
    events: list[tuple[str, list[Outcome]]] = [
        ("e1", [StepFailed(index=1, attempt=1, reason="timeout", retryable=True)]),
        ("e2", []),  # the backoff has not run out: nothing changes
        ("e1", [StepFailed(index=1, attempt=1, reason="timeout", retryable=True)]),  # again
    ]
    for key, outcomes in events:
        await sender.deliver_handed()
        await reconciler.reconcile(cid, event_key=key, outcomes=outcomes)
    clock.advance(timedelta(hours=1))
    later: list[tuple[str, list[Outcome]]] = [
        ("tick", []),  # the retry is due: step 1 dispatched again
        ("e3", [StepSucceeded(index=1, attempt=2, summary="ok", files=["a.md", "b.md"])]),
        ("e4", [StepBlocked(index=2, attempt=1, question="which one?")]),
        ("e5", [StepSucceeded(index=3, attempt=1, summary="three")]),
    ]
    for key, outcomes in later:
        await sender.deliver_handed()
        await reconciler.reconcile(cid, event_key=key, outcomes=outcomes)
    await sender.flush()
    await db.dispose()
    with sqlite3.connect(path) as raw:
        return {t: raw.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in TABLES}


async def test_prepared_statements_store_what_sqlalchemy_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared = await _scenario(tmp_path / "prepared.db")
    monkeypatch.setattr(Prepared, "runs_on", staticmethod(lambda _conn: False))
    through_sqlalchemy = await _scenario(tmp_path / "sqlalchemy.db")
    assert prepared == through_sqlalchemy
    steps = prepared["plan_steps"]
    assert any('["a.md", "b.md"]' in row for row in steps)  # JSON written as text
    assert any(row[-1] is not None for row in prepared["outbox"])  # rows marked sent
    assert len(prepared["processed_events"]) == 6  # e1 once


async def test_a_step_s_statements_run_without_transient_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every statement the scenario's reconciles and deliveries run after the plan's start
    runs without a transient table (`OpenEphemeral` in its program): SQLite builds one – a
    pager, a b-tree, a zeroed page – for `INSERT … RETURNING`, `UPDATE … FROM (VALUES …)`,
    `id IN (…)`, an UPDATE walking an index it changes …, and set up per statement it cost
    more than the writes themselves (bench/README.md, "Ninth pass"). Each statement is
    explained as it ran (the trace gives it with its values)."""
    ran: list[str] = []
    tracing = False
    original = sqlite3.dbapi2.connect  # the worker thread's driver (aiosqlite's not traced)

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn: sqlite3.Connection = original(*args, **kwargs)
        conn.set_trace_callback(lambda sql: ran.append(sql) if tracing else None)
        return conn

    def start_tracing() -> None:
        nonlocal tracing
        tracing = True

    monkeypatch.setattr(sqlite3.dbapi2, "connect", connect)
    await _scenario(tmp_path / "flotilla.db", after_start=start_tracing)
    statements = {sql for sql in ran if sql.lstrip()[:6].upper() in ("INSERT", "UPDATE", "SELECT")}
    # the multi-row forms ran: several steps in one update, rows inserted and marked sent
    assert any(sql.startswith("UPDATE plan_steps") and " CASE " in sql for sql in statements)
    assert any(sql.startswith("INSERT INTO outbox") and "), (" in sql for sql in statements)
    assert any(sql.startswith("UPDATE outbox") and " BETWEEN " in sql for sql in statements)
    with sqlite3.connect(tmp_path / "flotilla.db") as raw:
        transient = [
            sql
            for sql in sorted(statements)
            if any(op[1] == "OpenEphemeral" for op in raw.execute(f"EXPLAIN {sql}"))
        ]
    assert transient == []


async def test_a_driver_error_is_sqlalchemys_and_rolls_the_transaction_back(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'flotilla.db'}")
    await upgrade(db)
    row: dict[str, Any] = {
        "idempotency_key": "k",
        "kind": "update_plan_card",
        "conversation_id": None,
        "payload": {},
        "available_at": None,
    }

    def work(conn: Connection) -> int:
        assert Prepared.runs_on(conn)  # the DBAPI path, not SQLAlchemy's
        return enqueue_effects(conn, [row, row], T0)  # the same key twice

    with pytest.raises(IntegrityError):
        await run_transaction(db, work)
    assert await outbox_keys(db) == []  # the first row went with the rollback
    await db.dispose()


async def test_several_steps_change_in_one_guarded_statement(tmp_path: Path) -> None:
    """The DBAPI path writes a reconcile's changed steps in one statement, each still guarded
    by the (status, attempts) it was read with: one row found changed fails the whole write
    (`ConcurrentPlanChange`) and nothing of it is kept."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'flotilla.db'}")
    await upgrade(db)
    clock = FakeClock(T0)
    reconciler = Reconciler(db, clock=clock)
    cid = await new_conversation(db, "t")
    await reconciler.start_plan(cid, diamond(), assignees=AGENTS, max_parallel=2)

    def retitle(guard_of_3: str) -> Callable[[Connection], None]:
        def work(conn: Connection) -> None:
            assert Prepared.runs_on(conn)
            loaded = load_latest_plan(conn, cid)
            assert loaded is not None and loaded.steps is not None
            rows = {row["index"]: dict(row) for row in loaded.steps}
            changes = [
                (rows[i] | {"title": f"step {i}, retitled"}, was, 0)
                for i, was in ((2, "pending"), (3, guard_of_3))
            ]
            update_steps(conn, loaded.plan["id"], changes)

        return work

    async def titles() -> list[str]:
        plan = await reconciler.plan(cid)
        assert plan is not None
        return [step.title for step in plan.steps]

    before = await titles()
    with pytest.raises(ConcurrentPlanChange):
        await run_transaction(db, retitle("in_progress"))  # step 3 is pending: stale guard
    assert await titles() == before  # step 2's change went with the rollback
    await run_transaction(db, retitle("pending"))
    assert (await titles())[1:3] == ["step 2, retitled", "step 3, retitled"]
    await db.dispose()


@pytest.mark.parametrize("prepared", [True, False], ids=["dbapi", "sqlalchemy"])
async def test_rows_delivered_and_rows_settled_are_marked_sent_by_one_statement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prepared: bool
) -> None:
    """A reconcile marks the rows its sender delivered (by id) and the row a job's settle
    ended (by key) in one statement; a row given up meanwhile, and any other row, keep
    their state."""
    if not prepared:
        monkeypatch.setattr(Prepared, "runs_on", staticmethod(lambda _conn: False))

    def row(key: str) -> dict[str, Any]:
        return {
            "idempotency_key": key,
            "kind": "update_plan_card",
            "conversation_id": None,
            "payload": {},
            "available_at": None,
        }

    def given(conn: Connection) -> dict[str, int]:
        enqueue_effects(conn, [row(k) for k in ("delivered", "settled", "other", "gone")], T0)
        conn.exec_driver_sql("UPDATE outbox SET state = 'failed' WHERE idempotency_key = 'gone'")
        found = conn.exec_driver_sql("SELECT idempotency_key, id FROM outbox").all()
        return {str(key): int(row_id) for key, row_id in found}

    with counting() as counts:
        db = Database(f"sqlite+aiosqlite:///{tmp_path / 'flotilla.db'}")
        await upgrade(db)
        ids = await run_transaction(db, given)
        counts.reset()
        await run_transaction(
            db, lambda conn: mark_sent(conn, [ids["delivered"]], T0, keys=["settled", "gone"])
        )
        assert counts.statements == {"UPDATE outbox": 1}
    async with db.read() as conn:
        found = await conn.exec_driver_sql("SELECT idempotency_key, state FROM outbox")
        rows: list[Any] = list(found.all())
    states = {str(key): str(state) for key, state in rows}
    assert states == {"delivered": "sent", "settled": "sent", "other": "pending", "gone": "failed"}
    await db.dispose()
