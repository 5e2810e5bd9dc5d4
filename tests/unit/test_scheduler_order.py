"""`admit` decides as an independent model of the documented rules does: the order and the
reasons of `agents/scheduling/scheduler.py`'s docstrings, written here from scratch and
applied the plain way – the first run in fair order among all still pending, one at a time
(quadratic; `admit` sorts once per grant instead, since 1,000 waiting runs cost about
0.45 s a pass that way, holding the admission lock). The model uses only the scheduler's
public names, none of its helpers, so a slip in one of those cannot hide in both.
Property-tested on random queues, weights, workspaces, budgets and history."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from flotilla.agents.scheduling.scheduler import (
    Admission,
    Budget,
    Limits,
    Running,
    RunRequest,
    Wait,
    admit,
    budget_sentence,
    in_line,
)
from tests.unit.test_scheduler import SETTINGS, T0, TENANTS, situations

WORKSPACES = ("W1", "W2")


@dataclass
class Ledger:
    """What a pass has handed out so far: the slots each tenant holds (its running runs,
    those it was served recently, those granted in this pass), the runs of each agent and
    tool, and the tokens granted against each budget."""

    workspace_of: dict[str, str]
    held: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    agents: Counter[str] = field(default_factory=Counter)
    tools: Counter[str] = field(default_factory=Counter)
    spent: Counter[str] = field(default_factory=Counter)

    def slots_of_workspace(self, workspace: str) -> float:
        return sum(n for t, n in self.held.items() if self.workspace_of.get(t) == workspace)

    def take(self, tenant: str, agent: str, tools: Sequence[str]) -> None:
        self.held[tenant] += 1
        self.agents[agent] += 1
        self.tools.update(set(tools))


def fair_order(request: RunRequest, ledger: Ledger, limits: Limits) -> tuple[object, ...]:
    """Priority first; then the workspace holding the fewest slots per unit of its weight;
    then, inside it, the tenant (a channel) holding the fewest per unit of its weight; then
    first come, first served (the key only breaks a tie in time)."""
    weights = limits.weights
    workspace = request.workspace
    workspace_share = 0.0  # no workspace: only the tenant's share counts
    if workspace:
        workspace_share = ledger.slots_of_workspace(workspace) / weights.get(workspace, 1.0)
    tenant_share = ledger.held[request.tenant] / weights.get(request.tenant, 1.0)
    return (request.priority, workspace_share, tenant_share, request.enqueued_at, request.key)


def why_it_waits(request: RunRequest, ledger: Ledger, limits: Limits, now: datetime) -> Wait | None:
    """A run is judged on its own: its agent's quota, then its tools' quotas (by name),
    then the budgets it must fit – its tenant's, then its workspace's – with what this
    pass granted already counted, and an estimate above a whole period's budget counted as
    that budget."""
    agent_cap = limits.agent_caps.get(request.agent)
    if agent_cap is not None and ledger.agents[request.agent] >= agent_cap:
        busy = ledger.agents[request.agent]
        return Wait("agent", f"waiting: {request.agent} busy ({busy}/{agent_cap})")
    for tool in sorted(set(request.tools)):
        tool_cap = limits.tool_caps.get(tool)
        if tool_cap is not None and ledger.tools[tool] >= tool_cap:
            return Wait("tool", f"waiting: {tool} busy ({ledger.tools[tool]}/{tool_cap})")
    for scope in (request.tenant, request.workspace):
        budget = limits.budgets.get(scope) if scope else None
        if budget is None:
            continue
        estimate = request.estimate_tokens
        if budget.limit is not None:
            estimate = min(estimate, budget.limit)
        if ledger.spent[scope] + estimate > budget.remaining:
            return Wait("budget", budget_sentence(budget, now))
    return None


def model_admit(
    waiting: Sequence[RunRequest],
    running: Sequence[Running],
    limits: Limits,
    now: datetime,
    served: Mapping[str, float] | None = None,
) -> Admission:
    """The definition, one run at a time: the first in fair order among every run still
    pending is granted a free slot unless a quota or a budget holds it; with no slot free
    it waits in line, numbered in the order the runs were judged."""
    workspace_of = {r.tenant: r.workspace for r in waiting if r.workspace}
    workspace_of |= {r.tenant: r.workspace for r in running if r.workspace}
    ledger = Ledger(workspace_of)
    for run in running:
        ledger.take(run.tenant, run.agent, run.tools)
    for tenant, count in (served or {}).items():
        ledger.held[tenant] += count
    free = limits.capacity - len(running)
    grants: list[str] = []
    waits: dict[str, Wait] = {}
    line: list[str] = []
    pending = list(waiting)
    while pending:
        request = min(pending, key=lambda r: fair_order(r, ledger, limits))
        pending.remove(request)
        reason = why_it_waits(request, ledger, limits, now)
        if reason is not None:
            waits[request.key] = reason
        elif free <= 0:
            line.append(request.key)
        else:
            grants.append(request.key)
            free -= 1
            ledger.take(request.tenant, request.agent, request.tools)
            for scope in (request.tenant, request.workspace):
                if scope:
                    ledger.spent[scope] += request.estimate_tokens
    for place, key in enumerate(line, start=1):
        waits[key] = Wait("capacity", f"waiting: {in_line(place)}")
    return Admission(tuple(grants), waits)


# budgets with a whole period's limit (an estimate above it counts as it), for tenants and
# workspaces, over those the situations draw
budgets = st.builds(
    Budget,
    st.integers(0, 8_000),
    st.sampled_from([None, T0 + timedelta(hours=15), T0 + timedelta(days=20)]),
    st.sampled_from(["channel budget", "workspace budget"]),
    st.none() | st.integers(0, 3_000),
)


@SETTINGS
@given(
    situations(),
    st.dictionaries(st.sampled_from(TENANTS), st.integers(0, 6), max_size=4),
    st.dictionaries(
        st.sampled_from(TENANTS + WORKSPACES),
        st.sampled_from([0.5, 1.0, 2.0, 3.0]),
        max_size=6,
    ),
    st.booleans(),
    st.dictionaries(st.sampled_from(TENANTS + WORKSPACES), budgets, max_size=4),
)
def test_admit_decides_as_the_model_of_the_documented_rules(
    situation: tuple[list[RunRequest], list[Running], Limits],
    served: dict[str, int],
    weights: dict[str, float],
    two_workspaces: bool,
    more_budgets: dict[str, Budget],
) -> None:
    waiting, running, limits = situation
    if two_workspaces:  # tenants T1, T2 in one workspace, T3, T4 in another
        waiting = [replace(r, workspace="W1" if r.tenant < "T3" else "W2") for r in waiting]
        running = [replace(r, workspace="W1" if r.tenant < "T3" else "W2") for r in running]
    limits = replace(limits, weights=weights, budgets={**limits.budgets, **more_budgets})
    served_counts = {k: float(v) for k, v in served.items()}
    assert admit(waiting, running, limits, T0, served_counts) == model_admit(
        waiting, running, limits, T0, served_counts
    )
