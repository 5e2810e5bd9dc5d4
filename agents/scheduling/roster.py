"""The workspace's agents (and its default model) as this process last read them: one
read serves many look-ups – the process's one cache of the agents table (the admission
loop's quota keys come from it too, `agents/scheduling/admission.py`).

Every step used to read the agents table several times – its assignee, the enabled
names for the reconcile, each identity it posts as, the roster of the plan card – and the
workspace's default model for each run. The roster reads the whole (small) table and the
model once and answers from memory until it is forgotten: at once when an admin changes
an agent or the model in this process (`bot/admin.py` calls `forget`), and after
`max_age_s` in any case, so a change made through another replica is seen within that
time.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from flotilla.storage.agents import list_agents_with
from flotilla.storage.db import Database
from flotilla.storage.records import AgentRecord
from flotilla.storage.workspaces import default_model_of

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
        # team, read at, agents by name, the workspace's default model
        self._read: tuple[str, float, dict[str, AgentRecord], str | None] | None = None
        self._generation = 0  # a read begun before a `forget` is not kept
        self.reads = 0

    def forget(self) -> None:
        """Read the agents again on the next look-up (an agent was changed)."""
        self._read = None
        self._generation += 1

    async def agents(self) -> dict[str, AgentRecord]:
        """Every agent of the team by name (enabled or not), in name order."""
        return (await self._current())[2]

    async def default_model(self) -> str | None:
        """The workspace's default model (an admin's choice), if one is set."""
        return (await self._current())[3]

    async def _current(self) -> tuple[str, float, dict[str, AgentRecord], str | None]:
        team, now = self.team_id(), self.monotonic()
        kept = self._read
        if kept is not None and kept[0] == team and now - kept[1] < self.max_age_s:
            return kept
        generation = self._generation
        async with self.db.read() as conn:
            records, model = await list_agents_with(conn, team, default_model_of(team))
        self.reads += 1
        read = (team, now, {record.name: record for record in records}, model)
        if generation == self._generation:
            self._read = read
        return read

    async def agent(self, name: str) -> AgentRecord | None:
        return (await self.agents()).get(name)

    async def enabled(self) -> list[AgentRecord]:
        return [record for record in (await self.agents()).values() if record.enabled]

    async def enabled_names(self) -> list[str]:
        return [record.name for record in await self.enabled()]
