"""A plan's step rows: their columns, and the reconciler's inserts and guarded updates.

Synchronous, over a `Connection`, like the plan row's statements (`storage/plans.py`, which
reads a plan with its steps in one statement). A step row is updated only `WHERE status =
:was AND attempts = :was_attempts` – what the reconciler read – so "mark dispatched" is
`… WHERE status = 'pending'`; a row found changed raises `ConcurrentPlanChange` and the
whole transaction rolls back.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Table, bindparam, func, insert, update
from sqlalchemy.engine import Connection

from flotilla.storage.prepared import ROWS_A_STATEMENT, Prepared, prepared_insert, run_sql
from flotilla.storage.sql import ConcurrentPlanChange
from flotilla.storage.tables import PlanStep

steps_t: Table = PlanStep.__table__  # type: ignore[assignment]

# step columns the reconciler reads and writes (besides plan_id and index)
STEP_FIELDS = (
    "title",
    "assignee",
    "input",
    "wait_for",
    "on_failure",
    "form",
    "status",
    "output_summary",
    "output_files",
    "failure_reason",
    "attempts",
    "transient_failures",
    "retries",
    "not_before",
    "blocked_question",
)
MUTABLE_FIELDS = (
    "title",
    "input",
    "status",
    "output_summary",
    "output_files",
    "failure_reason",
    "attempts",
    "transient_failures",
    "retries",
    "not_before",
    "blocked_question",
)

_INSERT_STEPS = insert(steps_t)


def insert_steps(conn: Connection, plan_id: int, rows: Sequence[dict[str, Any]]) -> None:
    """New step rows (each with `index` and STEP_FIELDS, optionally started_at)."""
    if not rows:
        return
    values = [{"plan_id": plan_id, "started_at": None, "finished_at": None} | r for r in rows]
    if Prepared.runs_on(conn):
        prepared_insert(steps_t, values[0]).insert_rows(conn, values)
    else:
        conn.execute(_INSERT_STEPS, values)


_UPDATE_STEP = (
    update(steps_t)
    .where(
        steps_t.c.plan_id == bindparam("b_plan_id"),
        steps_t.c.index == bindparam("b_index"),
        steps_t.c.status == bindparam("b_was_status"),
        steps_t.c.attempts == bindparam("b_was_attempts"),
    )
    .values(
        **{name: bindparam(f"b_{name}") for name in MUTABLE_FIELDS},
        started_at=func.coalesce(
            bindparam("b_started_at", type_=steps_t.c.started_at.type), steps_t.c.started_at
        ),
        finished_at=bindparam("b_finished_at"),
    )
)
_UPDATE_STEP_PREPARED = Prepared(_UPDATE_STEP)
# (parameter, row key) of a step update, named once
_STEP_PARAMS = tuple((f"b_{k}", k) for k in (*MUTABLE_FIELDS, "started_at", "finished_at", "index"))


def update_steps(
    conn: Connection, plan_id: int, changes: Sequence[tuple[dict[str, Any], str, int]]
) -> None:
    """Write changed steps, each guarded by (status, attempts) as read: `(row, was, was_n)`.

    The dispatch of a step is thus `… WHERE status = 'pending' AND attempts = :n`.
    Raises `ConcurrentPlanChange` when a row no longer matches what was read.
    """
    if not changes:
        return
    params = [
        {b: row.get(k) for b, k in _STEP_PARAMS}
        | {"b_plan_id": plan_id, "b_was_status": was, "b_was_attempts": was_attempts}
        for row, was, was_attempts in changes
    ]
    if Prepared.runs_on(conn):  # one statement for all the rows (`_update_rows`)
        rowcount, sane = _update_rows(conn, params), True
    else:
        rowcount = conn.execute(_UPDATE_STEP, params[0] if len(params) == 1 else params).rowcount
        sane = len(params) == 1 or conn.dialect.supports_sane_multi_rowcount
    if sane and rowcount != len(params):
        raise ConcurrentPlanChange(f"plan {plan_id}: a step changed under the reconciler")


# The DBAPI path's update of several steps at once: one UPDATE for up to `ROWS_A_STATEMENT`
# steps, each row of parameters one step's of `_UPDATE_STEP` – bound as that statement binds
# them, in its order – its guard included. Each column is set by a `CASE` on the step's index,
# and the UPDATE walks the plan's steps from the smallest index to the largest, keeping those
# whose own guard holds: no transient table, where `UPDATE … FROM (VALUES …)` or
# `"index" IN (…)` builds one (or two) per statement – a pager, a b-tree and a zeroed page,
# ~25,000 instructions each under callgrind. The `+` keeps SQLite from using the ORs as
# index look-ups of their own. A plan's steps are few, so the walk is short.
def _update_rows(conn: Connection, params: list[dict[str, Any]]) -> int:
    """`_UPDATE_STEP` for each row of `params`, as few statements; the rows they changed."""
    if len(params) == 1:
        return int(_UPDATE_STEP_PREPARED.execute(conn, params[0]).rowcount)
    names = _UPDATE_STEP_PREPARED.names(conn.dialect)
    changed = 0
    for start in range(0, len(params), ROWS_A_STATEMENT):
        chunk = params[start : start + ROWS_A_STATEMENT]
        values = [v for row in chunk for v in _UPDATE_STEP_PREPARED.bound(conn, row)]
        indexes = [row["b_index"] for row in chunk]
        values += [min(indexes), max(indexes)]
        changed += int(run_sql(conn, _rows_update_sql(names, len(chunk)), values).rowcount)
    return changed


@lru_cache(maxsize=ROWS_A_STATEMENT)
def _rows_update_sql(names: tuple[str, ...], rows: int) -> str:
    """`rows` steps' update: each step's parameters in `names` order, then the smallest and
    the largest index."""
    at = {name: i for i, name in enumerate(names, start=1)}

    def each(name: str) -> str:  # the parameter `name` of the step being written
        whens = " ".join(
            f"WHEN ?{r * len(names) + at['b_index']} THEN ?{r * len(names) + at[name]}"
            for r in range(rows)
        )
        return f'CASE "index" {whens} END'

    sets = [f"{name} = {each(f'b_{name}')}" for name in MUTABLE_FIELDS]
    sets.append(f"started_at = coalesce({each('b_started_at')}, started_at)")
    sets.append(f"finished_at = {each('b_finished_at')}")
    guards = " OR ".join(
        f'(+"index" = ?{r * len(names) + at["b_index"]} '
        f"AND status = ?{r * len(names) + at['b_was_status']} "
        f"AND attempts = ?{r * len(names) + at['b_was_attempts']})"
        for r in range(rows)
    )
    lowest, highest = rows * len(names) + 1, rows * len(names) + 2
    return (
        f"UPDATE plan_steps SET {', '.join(sets)} "
        f'WHERE plan_id = ?{at["b_plan_id"]} AND "index" BETWEEN ?{lowest} AND ?{highest} '
        f"AND ({guards})"
    )
