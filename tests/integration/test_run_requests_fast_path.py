"""The idle scheduler's fast path in the database: a request is granted in the statement
that inserts it while nobody waits and the caps have room, and only then; a grant is the
run's lease (renewed, lost, ended in one statement each)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flotilla.storage.db import Database
from flotilla.storage.run_request_leases import (
    finish_held_request,
    finish_request,
    grant_at_once,
    holders,
    pass_slot,
    renew_request,
    urgent_waits,
)
from flotilla.storage.run_requests import (
    enqueue_request,
    get_request,
    grant_request,
    lock_admission,
    set_wait_reasons,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=30)


def values(key: str, agent: str = "researcher") -> dict[str, Any]:
    return dict(
        effect_key=f"dispatch:{key}",
        effect_kind="post_dispatch",
        effect={"a": [1]},
        conversation_id=None,
        team_id="T1",
        channel_id="C1",
        agent_name=agent,
        plan_id=None,
        step_index=None,
        attempt=None,
        priority=3,
        estimate_tokens=10,
        tools=["web"],
    )


async def fast(db: Database, key: str, owner: str = "p1", **caps: Any) -> bool:
    limits = dict(capacity=2, process_capacity=2, agent_cap=None) | caps
    async with db.write() as conn:
        await lock_admission(conn)
        return await grant_at_once(
            conn, run_key=key, owner=owner, now=NOW, until=LATER, **limits, **values(key)
        )


async def test_granted_at_once_while_caps_have_room_and_nobody_waits(db: Database) -> None:
    assert await fast(db, "r1")
    async with db.read() as conn:
        record = await get_request(conn, "r1")
        assert record is not None
        assert (record.state, record.holder, record.grants) == ("granted", "p1", 1)
        assert (record.effect, record.tools) == ({"a": [1]}, ["web"])
        assert await holders(conn) == {"r1": ("p1", record.lease_until)}
    assert not await fast(db, "r1")  # there already: the queue decides
    assert not await fast(db, "r2", process_capacity=1)  # p1 holds its one slot
    assert not await fast(db, "r2", agent_cap=1)  # the researcher's quota is used
    assert await fast(db, "r2", owner="p2")
    assert not await fast(db, "r3", owner="p3")  # the deployment's 2 slots are held
    async with db.write() as conn:
        assert not await finish_request(conn, "r1", NOW)  # nobody waits
        await enqueue_request(conn, run_key="r4", now=NOW, **values("r4"))
        assert await finish_request(conn, "r2", NOW)  # r4 waits
    assert not await fast(db, "r5")  # r4 was first: no overtaking through the fast path
    async with db.write() as conn:
        assert await grant_request(conn, "r4", "p1", now=NOW, until=LATER)
        assert not await grant_request(conn, "r4", "p2", now=NOW, until=LATER)
    assert await fast(db, "r5")


async def test_a_grant_is_the_runs_lease(db: Database) -> None:
    assert await fast(db, "r1")
    async with db.write() as conn:
        assert await renew_request(conn, "r1", "p1", LATER)
        assert not await renew_request(conn, "r1", "p2", LATER)  # not p2's
        await finish_request(conn, "r1", NOW)
        assert not await renew_request(conn, "r1", "p1", LATER)  # ended


async def test_a_paused_runs_slot_goes_to_the_most_urgent_run_waiting_for_a_slot(
    db: Database,
) -> None:
    async with db.write() as conn:
        for key, priority in (("batch", 5), ("normal", 3), ("urgent", 1), ("urgent-later", 1)):
            await enqueue_request(
                conn, run_key=key, now=NOW, **values(key) | {"priority": priority}
            )
        # no pass has looked at them yet: each may be held by a quota, none is handed a slot
        assert await pass_slot(conn, "p1", now=NOW, until=LATER, priority_at_most=1) is None
        await set_wait_reasons(
            conn,
            [
                ("urgent", "agent", "waiting: researcher busy (2/2)"),
                ("urgent-later", "capacity", "waiting: next in line"),
            ],
        )
        # none of them holds a slot: none has one to give
        assert not await urgent_waits(conn, "batch", priority_at_most=1, yields_from=4)
        # "urgent" waits for its agent, not for a slot: the later urgent run is given it
        assert await pass_slot(conn, "p1", now=NOW, until=LATER, priority_at_most=1) == (
            "urgent-later"
        )
        record = await get_request(conn, "urgent-later")
        assert record is not None and (record.state, record.holder) == ("granted", "p1")
        # no other urgent run waits only for a slot: a pass decides
        assert await pass_slot(conn, "p1", now=NOW, until=LATER, priority_at_most=1) is None


async def test_a_settle_in_a_reconcile_finishes_only_a_grant_its_owner_still_holds(
    db: Database,
) -> None:
    """`finish_held_request` (a job's settle in its outcome's reconcile, on a synchronous
    connection): a grant lost to another process is left as it is (None); the owner's is
    finished, saying whether others wait for a slot."""
    assert await fast(db, "r1", owner="p2")
    async with db.write() as conn:
        assert await conn.run_sync(finish_held_request, "r1", "p1", NOW) is None
        assert await conn.run_sync(finish_held_request, "r1", "p2", NOW) is False
    async with db.read() as conn:
        record = await get_request(conn, "r1")
        assert record is not None
        assert (record.state, record.holder) == ("done", None)
    async with db.write() as conn:  # finished already: nothing held, nothing written
        assert await conn.run_sync(finish_held_request, "r1", "p2", NOW) is None
