"""The admission loop's facts take the agent's record from the roster – the process's one
cache of the agents table – so an admin's edit of an agent (which `forget`s the roster) is
seen by the scheduler's quota keys at once, as by everything else; the workspace's
settings and the token estimate stay remembered for a poll interval."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flotilla.agents.scheduling.admission import AdmissionLoop, SlotFacts
from flotilla.agents.scheduling.admission_policy import SchedulerOptions
from flotilla.agents.scheduling.roster import Roster
from flotilla.storage.agents import create_agent, update_agent
from flotilla.storage.db import Database
from flotilla.storage.records import RunRequestRecord
from flotilla.storage.runs import save_run
from flotilla.storage.workspaces import ensure_workspace, set_workspace_settings

NOW = datetime(2026, 12, 2, tzinfo=UTC)


async def facts(loop: AdmissionLoop, team_id: str, agent: str) -> SlotFacts:
    """What a slot request takes (`agents/slot_requests.slot_request`): the agent's quota
    keys from the roster, the facts kept for the poll interval, else read."""
    tools = await loop.tools_of(team_id, agent)
    if (known := loop.facts_kept(team_id, agent, tools)) is not None:
        return known
    async with loop.db.read() as conn:
        return await loop.facts_in(conn, team_id, agent, tools)


async def _nothing(*_: object) -> None:
    return None


async def _refuse(record: RunRequestRecord, reason: str) -> None:
    return None


async def test_an_agent_edit_is_seen_by_the_roster_and_the_facts_at_once(db: Database) -> None:
    async with db.write() as conn:
        await ensure_workspace(conn, "T1", NOW)
        await create_agent(conn, "T1", "writer", NOW, display_name="Writer", tools=["http_fetch"])
    roster = Roster(db, lambda: "T1", max_age_s=3600.0)  # only a `forget` makes it read again
    loop = AdmissionLoop(
        db,
        owner="p1",
        team_id=lambda: "T1",
        clock=lambda: NOW,
        options=SchedulerOptions(poll_seconds=3600.0),
        lease=timedelta(seconds=30),
        start=_nothing,
        show_waits=_nothing,
        refuse=_refuse,
        roster=roster,
    )
    assert (await facts(loop, "T1", "writer")).tools == ("http_fetch",)
    assert (await facts(loop, "T1", "commander")).tools == ()  # the commander has no record
    reads = roster.reads

    async with db.write() as conn:  # an admin's edit (bot/admin.py), then its `forget`
        await update_agent(conn, "T1", "writer", NOW, tools=["write_file"])
    roster.forget()
    assert (await facts(loop, "T1", "writer")).tools == ("write_file",)  # within the interval
    assert (await roster.agent("writer")) is not None
    assert roster.reads == reads + 1  # one read of the table served both


async def test_facts_read_in_a_callers_read_are_the_ones_a_request_then_takes(
    db: Database,
) -> None:
    """A dispatch reads its slot request's facts in its "still current" read
    (`read_facts_in`): the request then reads nothing, and facts already known for the
    poll interval are not read again there either."""
    async with db.write() as conn:
        await ensure_workspace(conn, "T1", NOW)
        await set_workspace_settings(conn, "T1", {"mark": "before"})
    loop = AdmissionLoop(
        db,
        owner="p1",
        team_id=lambda: "T1",
        clock=lambda: NOW,
        options=SchedulerOptions(poll_seconds=3600.0),
        lease=timedelta(seconds=30),
        start=_nothing,
        show_waits=_nothing,
        refuse=_refuse,
    )
    async with db.read() as conn:
        await loop.read_facts_in(conn, "T1", "writer")
    async with db.write() as conn:  # changed after: within the interval, not read again
        await set_workspace_settings(conn, "T1", {"mark": "after"})
    async with db.read() as conn:
        await loop.read_facts_in(conn, "T1", "writer")
    assert (await facts(loop, "T1", "writer")).settings == {"mark": "before"}
    loop.changed()  # an admin's change: read afresh
    async with db.read() as conn:
        await loop.read_facts_in(conn, "T1", "writer")
    assert (await facts(loop, "T1", "writer")).settings == {"mark": "after"}


async def test_the_settings_and_the_estimate_read_together(db: Database) -> None:
    """A slot request's facts: the workspace's settings (none stored: `{}`) and the mean
    tokens of the agent's last finished runs (none: 0), read in one statement."""
    async with db.write() as conn:
        await ensure_workspace(conn, "T1", NOW)
        await set_workspace_settings(conn, "T1", {"max_running": 3})
        for key, status, tokens in (
            ("a", "finished", 100),
            ("b", "finished", 300),
            ("c", "failed", 9_000),
        ):
            await save_run(
                conn,
                run_key=key,
                agent_name="writer",
                model="m",
                status=status,
                messages=[],
                now=NOW,
                input_tokens=tokens,
                output_tokens=0,
            )
    loop = AdmissionLoop(
        db,
        owner="p1",
        team_id=lambda: "T1",
        clock=lambda: NOW,
        options=SchedulerOptions(poll_seconds=3600.0),
        lease=timedelta(seconds=30),
        start=_nothing,
        show_waits=_nothing,
        refuse=_refuse,
    )
    writer = await facts(loop, "T1", "writer")
    assert (writer.settings, writer.estimate) == ({"max_running": 3}, 200)
    assert (await facts(loop, "T1", "researcher")).estimate == 0  # no run finished yet
    assert (await facts(loop, "T2", "writer")).settings == {}  # a workspace not stored


async def test_a_claim_reads_the_facts_of_its_plan_s_other_agents_with_its_own(
    db: Database,
) -> None:
    """A step's claim reads the facts of the plan's other agents in the same statement
    (those not known yet): their steps' claims then read none."""
    async with db.write() as conn:
        await ensure_workspace(conn, "T1", NOW)
    loop = AdmissionLoop(
        db,
        owner="p1",
        team_id=lambda: "T1",
        clock=lambda: NOW,
        options=SchedulerOptions(poll_seconds=3600.0),
        lease=timedelta(seconds=30),
        start=_nothing,
        show_waits=_nothing,
        refuse=_refuse,
    )
    assert loop.facts_kept("T1", "analyst", ()) is None
    async with db.read() as conn:
        await loop.facts_in(conn, "T1", "researcher", (), also_for={"analyst", "writer"})
    assert loop.facts_kept("T1", "analyst", ()) is not None
    assert loop.facts_kept("T1", "writer", ()) is not None
    assert loop.facts_kept("T1", "commander", ()) is None  # not asked for
