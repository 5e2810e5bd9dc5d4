"""The reports behind `/flotilla` and the App Home tab: the agents, the running plans, this
month's usage and feedback, the audit trail and (for admins) the scheduler's queue and
limits. Reading only; changes are `bot/admin.py`'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from slack_sdk.errors import SlackApiError

from flotilla.bot import admin_scheduler
from flotilla.storage import audit as audit_log
from flotilla.storage import plans as plan_store
from flotilla.storage.agents import list_agents
from flotilla.storage.feedback import feedback_since
from flotilla.storage.records import AgentRecord, AuditRecord, FeedbackTotal, UsageTotal
from flotilla.storage.usage import usage_since

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reports:
    """Everything the App Home tab shows (admins see the audit trail too)."""

    agents: list[AgentRecord]
    plans: list[tuple[int, str, str, str]]
    usage_by_agent: list[UsageTotal]
    usage_by_channel: list[UsageTotal]
    feedback: list[FeedbackTotal]
    since: datetime
    audit: list[AuditRecord] | None
    scheduler: str | None = None  # admins: the queue and the limits (`/flotilla queue|quota`)

    @property
    def for_admin(self) -> bool:
        return self.audit is not None


async def agents(service: SlackService) -> list[AgentRecord]:
    async with service.db.read() as conn:
        return await list_agents(conn, service.team_id)


async def active_plans(service: SlackService) -> list[tuple[int, str, str, str]]:
    async with service.db.read() as conn:
        return await plan_store.active_plans(conn, service.team_id)


def month_start(now: datetime) -> datetime:
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


async def usage(
    service: SlackService,
) -> tuple[datetime, list[UsageTotal], list[UsageTotal], list[FeedbackTotal]]:
    """This month's token totals per agent and per channel, and feedback per agent."""
    since = month_start(service.clock())
    async with service.db.read() as conn:
        by_agent = await usage_since(conn, service.team_id, since, by="agent_name")
        by_channel = await usage_since(conn, service.team_id, since, by="channel_id")
        feedback = await feedback_since(conn, service.team_id, since)
    return since, by_agent, by_channel, feedback


async def audit_trail(service: SlackService, limit: int = 20) -> list[AuditRecord]:
    async with service.db.read() as conn:
        return list(await audit_log.audit_trail(conn, service.team_id, limit=limit))


async def reports(service: SlackService, user: str) -> Reports:
    """What the App Home shows `user` (the audit trail only to admins)."""
    since, by_agent, by_channel, feedback = await usage(service)
    admin = await service.is_admin(user)
    trail = await audit_trail(service, limit=10) if admin else None
    scheduler = None
    if admin:
        queue = await admin_scheduler.queue_text(service)
        scheduler = f"{queue}\n\n{await admin_scheduler.quota_text(service)}"
    return Reports(
        scheduler=scheduler,
        agents=await agents(service),
        plans=await active_plans(service),
        usage_by_agent=by_agent,
        usage_by_channel=by_channel,
        feedback=feedback,
        since=since,
        audit=trail,
    )


class WorkspaceUrl:
    """The workspace's base URL (from auth.test, asked once) for links to threads."""

    def __init__(self) -> None:
        self._url: str | None = None

    async def get(self, service: SlackService) -> str:
        if self._url is None:
            try:
                auth = await service.client.auth_test()
                self._url = str(auth.get("url") or "")
            except SlackApiError:
                log.warning("auth.test failed; thread links are left out")
                return ""
        return self._url
