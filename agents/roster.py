"""The workspace's agents as this process last read them: one read serves many look-ups.

Every step used to read the agents table several times – its assignee, the enabled
names for the reconcile, each identity it posts as, the roster of the plan card. The
roster reads the whole (small) table once and answers from memory until it is forgotten:
at once when an admin changes an agent in this process (`bot/admin.py` calls `forget`),
and after `max_age_s` in any case, so a change made through another replica is seen
within that time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from storage.agents import list_agents
from storage.db import Database
from storage.records import AgentRecord

ROSTER_MAX_AGE_S = 2.0


class Roster:
    """The agents of the team `team_id()` names, read at most once per `max_age_s`."""

    def __init__(
        self,
        db: Database,
        team_id: Callable[[], str],
        *,
        max_age_s: float = ROSTER_MAX_AGE_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db, self.team_id, self.max_age_s, self.monotonic = db, team_id, max_age_s, monotonic
        self._read: tuple[str, float, dict[str, AgentRecord]] | None = None  # team, at, agents
        self._generation = 0  # a read begun before a `forget` is not kept
        self.reads = 0

    def forget(self) -> None:
        """Read the agents again on the next look-up (an agent was changed)."""
        self._read = None
        self._generation += 1

    async def agents(self) -> dict[str, AgentRecord]:
        """Every agent of the team by name (enabled or not), in name order."""
        team, now = self.team_id(), self.monotonic()
        kept = self._read
        if kept is not None and kept[0] == team and now - kept[1] < self.max_age_s:
            return kept[2]
        generation = self._generation
        async with self.db.read() as conn:
            records = await list_agents(conn, team)
        self.reads += 1
        agents = {record.name: record for record in records}
        if generation == self._generation:
            self._read = (team, now, agents)
        return agents

    async def agent(self, name: str) -> AgentRecord | None:
        return (await self.agents()).get(name)

    async def enabled(self) -> list[AgentRecord]:
        return [record for record in (await self.agents()).values() if record.enabled]

    async def enabled_names(self) -> list[str]:
        return [record.name for record in await self.enabled()]
