"""Which own-app agents' answers the commander's answer offers 👍/👎 for.

Slack sends a click on a message's buttons to the app that posted it, so an agent with its
own Slack app cannot carry Flotilla's feedback buttons under its answers (Flotilla would
never hear the clicks). Its answers are rated where Flotilla can hear: under the commander's
answer built on them – a commander step's answer rates the own-app answers it waited for
(directly or not), the plan's final answer every own-app answer of the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from flotilla.agents.planning.commander_operations import upstream_of
from flotilla.agents.planning.plan import Plan
from flotilla.agents.planning.plan_store import plan_from_rows
from flotilla.agents.reconciling.ports import StepTag
from flotilla.bot.identities import Identity
from flotilla.bot.views.feedback import rating_blocks
from flotilla.storage.db import Database
from flotilla.storage.plans import load_plan


class AgentDirectory(Protocol):
    db: Database

    async def identities(self) -> Mapping[str, Identity]: ...


async def own_app_ratings(
    port: AgentDirectory, plan_id: int, answer_to: StepTag | None, plan: Plan | None = None
) -> list[dict[str, Any]]:
    """The rating blocks for the commander's answer to a step (None: the final answer);
    `plan`: as the caller read it since the steps it waited for were done (else read)."""
    db, identities = port.db, await port.identities()
    step = answer_to.step if answer_to is not None else None
    apps = {name for name, who in identities.items() if who.kind == "app"}
    if not apps:
        return []
    if plan is None or plan.id != plan_id:
        async with db.read() as conn:
            loaded = await conn.run_sync(load_plan, plan_id)
        if loaded is None:
            return []
        plan = plan_from_rows(loaded.plan, loaded.steps or [])
    if step is not None and plan.step(step) is None:
        return []
    built_on = upstream_of(plan, step) if step is not None else {s.index for s in plan.steps}
    rated = [
        (s.index, s.assignee, identities[s.assignee].mention)
        for s in plan.steps
        if s.index in built_on and s.status == "done" and s.assignee in apps
    ]
    return rating_blocks(plan_id, rated)
