"""A stored run request as the scheduler's pure policy sees it: waiting (`RunRequest`) or
running (`Running`), its tenant the workspace and channel it came from."""

from __future__ import annotations

from flotilla.agents.scheduling.admission_policy import tenant_of
from flotilla.agents.scheduling.scheduler import Running, RunRequest
from flotilla.storage.records import RunRequestRecord


def waiting_of(r: RunRequestRecord) -> RunRequest:
    return RunRequest(
        key=r.run_key,
        tenant=tenant_of(r.team_id, r.channel_id),
        agent=r.agent_name,
        enqueued_at=r.enqueued_at,
        priority=r.priority,
        tools=tuple(r.tools),
        estimate_tokens=r.estimate_tokens,
        workspace=r.team_id,
    )


def running_of(r: RunRequestRecord) -> Running:
    return Running(
        key=r.run_key,
        tenant=tenant_of(r.team_id, r.channel_id),
        agent=r.agent_name,
        started_at=r.granted_at or r.enqueued_at,
        priority=r.priority,
        tools=tuple(r.tools),
        workspace=r.team_id,
    )
