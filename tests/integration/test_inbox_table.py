"""The inbox table on both backends: stored once per key, claimed again only when its claim
ran out unprocessed, never once processed, and pruned after its retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flotilla.agents.reconciling.inbox import claim_cut_short, finish_inbound, store_inbound
from flotilla.storage.db import Database
from flotilla.storage.inbox import count_unprocessed_inbox, forget_processed_inbox_before

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CLAIM = timedelta(seconds=60)


async def store(db: Database, key: str, now: datetime = NOW) -> int | None:
    body = {"type": "block_actions", "trigger_id": key}
    return await store_inbound(db, now, key=key, kind="block_actions", body=body, claim=CLAIM)


async def test_a_key_is_stored_once_and_replayed_only_after_its_claim(db: Database) -> None:
    first = await store(db, "action:1")
    assert first is not None
    assert await store(db, "action:1") is None  # a redelivery
    assert await claim_cut_short(db, NOW + timedelta(seconds=59), CLAIM) == []
    [row] = await claim_cut_short(db, NOW + timedelta(seconds=61), CLAIM)
    assert (row.id, row.key, row.attempts) == (first, "action:1", 2)
    assert row.body == {"type": "block_actions", "trigger_id": "action:1"}
    # claimed again by that pass: nobody else takes it before its new claim runs out
    assert await claim_cut_short(db, NOW + timedelta(seconds=62), CLAIM) == []
    await finish_inbound(db, first, NOW + timedelta(seconds=63))
    assert await claim_cut_short(db, NOW + timedelta(days=1), CLAIM) == []
    async with db.read() as conn:
        assert await count_unprocessed_inbox(conn) == 0


async def test_processed_rows_are_pruned_after_their_retention_and_others_kept(
    db: Database,
) -> None:
    old = await store(db, "action:old")
    await store(db, "action:pending")
    assert old is not None
    await finish_inbound(db, old, NOW)
    async with db.write() as conn:
        assert await forget_processed_inbox_before(conn, NOW + timedelta(hours=1)) == 1
    async with db.read() as conn:
        assert await count_unprocessed_inbox(conn) == 1  # unprocessed: never pruned
    assert await store(db, "action:old") is not None  # its key is free again
