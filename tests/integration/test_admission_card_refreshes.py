"""A long queue's plan cards are edited only when the words they show change: places in
line are exact for the first three and coarse behind them, so a grant that moves every
place in line refreshes only the few cards whose sentence changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flotilla.agents.scheduling.admission import AdmissionLoop
from flotilla.agents.scheduling.admission_policy import SchedulerOptions
from flotilla.agents.scheduling.scheduler import in_line
from flotilla.storage.conversations import open_conversation
from flotilla.storage.db import Database
from flotilla.storage.records import RunRequestRecord
from flotilla.storage.run_request_leases import finish_request
from flotilla.storage.run_requests import queued_requests

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PLANS = 30  # one waiting step each, in one channel


def test_places_in_line_are_exact_for_three_then_coarse() -> None:
    assert [in_line(n) for n in (1, 2, 3, 4, 5, 6, 40)] == [
        "next in line",
        "2nd in line",
        "3rd in line",
        "in line (a few ahead)",
        "in line (a few ahead)",
        "in line (5+ ahead)",
        "in line (5+ ahead)",
    ]


async def test_a_pass_refreshes_only_the_cards_whose_words_changed(db: Database) -> None:
    refreshed: list[int] = []

    async def show_waits(conversation_id: int, plan_id: int) -> None:
        refreshed.append(plan_id)

    async def start(record: RunRequestRecord) -> None:
        return None

    async def refuse(record: RunRequestRecord, reason: str) -> None:
        return None

    loop = AdmissionLoop(
        db,
        owner="p1",
        team_id=lambda: "T1",
        clock=lambda: NOW,
        options=SchedulerOptions(capacity=2, process_capacity=2),
        lease=timedelta(minutes=5),
        start=start,
        show_waits=show_waits,
        refuse=refuse,
    )
    async with db.write() as conn:
        conversation = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts="1.0",
            requested_by="U1",
            request_text="work",
            now=NOW,
        )
    for plan in range(1, PLANS + 1):
        await loop.enqueue(
            run_key=f"plan:{plan}:step:1:attempt:1",
            effect_key=f"dispatch:{plan}",
            effect_kind="post_dispatch",
            effect={},
            conversation_id=conversation.id,
            team_id="T1",
            channel_id="C1",
            agent_name="researcher",
            plan_id=plan,
            step_index=1,
            attempt=1,
            priority=3,
            estimate_tokens=0,
            tools=[],
        )
    assert await loop.run_pass() == 2
    first = len(refreshed)
    assert first == PLANS - 2  # every waiting card says where it is once
    for _ in range(6):  # a run ends, the next is granted: every place moves by one
        refreshed.clear()
        async with db.read() as conn:
            held = [r for r in await queued_requests(conn) if r.state == "granted"]
        async with db.write() as conn:
            await finish_request(conn, held[0].run_key, NOW)
        assert await loop.run_pass() == 1
        # the granted card loses its reason; "next", "2nd", "3rd", the last "a few ahead"
        # and the first "5+ ahead" change; 20-odd cards behind them keep their words
        assert len(refreshed) <= 5, refreshed
    async with db.read() as conn:
        reasons = [r.wait_reason or "" for r in await queued_requests(conn) if r.state == "waiting"]
    assert sorted(reasons) == sorted(
        ["waiting: next in line", "waiting: 2nd in line", "waiting: 3rd in line"]
        + ["waiting: in line (a few ahead)"] * 2
        + ["waiting: in line (5+ ahead)"] * (PLANS - 2 - 6 - 5)
    )
