"""Slack features a workspace may not offer, and the memory of those it refused.

Streamed answers (`chat.startStream`) and agent session status (`agents.sessions.setStatus`)
are newer surfaces. When Slack answers that a workspace lacks one (`feature_disabled`,
`messages_tab_disabled`, an unknown method …), Flotilla falls back to the older way
(a whole message; `assistant.threads.setStatus`) and remembers it per workspace, in the
database, so it does not ask again – not after a restart either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.db import Database
from flotilla.storage.slack_fallbacks import fallbacks_of, record_fallback

log = logging.getLogger(__name__)

STREAMING = "streaming"
AGENT_SESSIONS = "agent_sessions"
THREAD_STATUS = "thread_status"
TASK_DISPLAY = "task_display"
# errors that say the workspace (or this app's install) lacks the feature, not this call
FEATURE_MISSING = frozenset(
    {
        "feature_disabled",
        "messages_tab_disabled",
        "unknown_method",
        "method_deprecated",
        "not_allowed_token_type",
        "missing_scope",
        "channel_type_not_supported",
    }
)


class SlackFeatures:
    """Which features each workspace refused (read once per workspace, then kept)."""

    def __init__(self, db: Database, clock: Callable[[], datetime]) -> None:
        self.db = db
        self.clock = clock
        self._missing: dict[str, set[str]] = {}

    async def read_in(self, conn: AsyncConnection, team_id: str) -> None:
        """Read what `team_id` refused in the caller's transaction (the service's start), so
        the first post reads nothing."""
        self._missing[team_id] = await fallbacks_of(conn, team_id)

    async def offers(self, team_id: str, feature: str) -> bool:
        """Whether `feature` is worth trying in `team_id` (not refused before)."""
        missing = self._missing.get(team_id)
        if missing is None:
            async with self.db.read() as conn:
                missing = await fallbacks_of(conn, team_id)
            self._missing[team_id] = missing
        return feature not in missing

    async def refused(
        self, team_id: str, feature: str, error: str, also: frozenset[str] = frozenset()
    ) -> bool:
        """Whether Slack's `error` means `team_id` lacks `feature` (`also`: errors that mean
        it for this feature); if so it is remembered."""
        if error not in FEATURE_MISSING and error not in also:
            return False
        self._missing.setdefault(team_id, set()).add(feature)
        async with self.db.write() as conn:
            await record_fallback(conn, team_id, feature, error, self.clock())
        log.warning(
            "Slack refused %s in workspace %s (%s): using the fallback", feature, team_id, error
        )
        return True
