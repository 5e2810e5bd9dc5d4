"""The thread's agent session status in Slack: processing, suspended, closed.

`agents.sessions.setStatus` where the workspace has agent sessions; where it does not
(`feature_disabled`, an unknown method …, remembered per workspace like streaming), the
older status line under the thread, `assistant.threads.setStatus` ("is working…", cleared
when the plan ends). A status is sent only when it changes. Best effort: a status that
cannot be shown is logged and never stops the work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.agents.core.lru import LRUCache
from flotilla.agents.planning.session_status import SessionStatus
from flotilla.bot.slack_features import AGENT_SESSIONS, THREAD_STATUS, SlackFeatures
from flotilla.storage.records import ConversationRecord

log = logging.getLogger(__name__)

TITLE_MAX = 200
STATUS_CACHE_SIZE = 1000  # conversations whose last status is remembered (bounded)
STATUS_LINES = {"processing": "is working…", "suspended": "is waiting…", "closed": ""}


class SessionStatuses:
    """Shows each conversation's session status in Slack, once per change."""

    def __init__(
        self,
        client: AsyncWebClient,
        features: SlackFeatures,
        team_id: Callable[[], str],
        cache_size: int = STATUS_CACHE_SIZE,
    ) -> None:
        self.client = client
        self.features = features
        self.team_id = team_id
        self._shown: LRUCache[int, str] = LRUCache(cache_size)

    async def show(
        self, conversation: ConversationRecord, status: SessionStatus, words: str = ""
    ) -> None:
        """Show `status` (`words` for the fallback status line); never raises."""
        line = f"is {words}…" if words and status != "closed" else STATUS_LINES[status]
        if self._shown.get(conversation.id) == f"{status}:{line}":
            return
        self._shown.put(conversation.id, f"{status}:{line}")
        try:
            if await self._session(conversation, status):
                return
            await self._status_line(conversation, line)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("the thread's status could not be shown: %s", type(exc).__name__)

    async def _session(self, conversation: ConversationRecord, status: SessionStatus) -> bool:
        """True when the agent session showed it (False: use the fallback)."""
        team = self.team_id()
        if not await self.features.offers(team, AGENT_SESSIONS):
            return False
        try:
            await self.client.agents_sessions_setStatus(
                channel_id=conversation.channel_id,
                thread_ts=conversation.thread_ts,
                status=status,
                title=" ".join(conversation.request_text.split())[:TITLE_MAX] or None,
                initiator_user_id=conversation.requested_by,
            )
        except SlackApiError as exc:
            error = str(exc.response.get("error", ""))
            if await self.features.refused(team, AGENT_SESSIONS, error):
                return False
            log.warning("agents.sessions.setStatus failed: %s", error)
        return True

    async def _status_line(self, conversation: ConversationRecord, line: str) -> None:
        team = self.team_id()
        if not await self.features.offers(team, THREAD_STATUS):
            return
        try:
            await self.client.assistant_threads_setStatus(
                channel_id=conversation.channel_id, thread_ts=conversation.thread_ts, status=line
            )
        except SlackApiError as exc:
            error = str(exc.response.get("error", ""))
            if not await self.features.refused(team, THREAD_STATUS, error):
                log.warning("assistant.threads.setStatus failed: %s", error)
