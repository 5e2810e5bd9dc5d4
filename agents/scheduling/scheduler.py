"""Admission and fair shares: which waiting runs start now, and why the others wait. Pure.

`admit(waiting, running, limits, now)` decides, from the runs waiting and the runs in
flight, which runs are granted a slot, why each other one waits (a sentence a person can
read). No I/O, no clock read:
the async loop that claims run requests in the database and grants leases calls it.

Order (learned from Temporal's fairness keys, Hatchet's group round robin, Inngest's key
queues and Kueue's admission):
- priority first (1 urgent … 5 batch): interactive work goes ahead of long plans;
- then the tenant (a workspace, or a workspace's channel) with the fewest slots per unit
  of weight – its running runs plus those granted in this pass – so one team's fifty-step
  plan cannot starve another team's request (weighted round robin over slots);
- then first come, first served inside a tenant.
Each run is judged on its own: a run whose agent is at its quota does not block the runs
behind it (no head-of-line blocking). Budgets are checked against the tokens a run is
estimated to spend, and a grant counts against the budget for the rest of the pass.

This module is where admission is decided. Two statements in `storage/` apply its rules
without a pass, each checked against them by a property test
(`tests/integration/test_admission_one_rule.py`): a request granted as it is written when
nobody waits (what `admit` grants with an empty queue – `admission_policy.fast_path`), and a
batch run yielding its slot to urgent work (`may_yield`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal

URGENT = 1
INTERACTIVE = 2  # a person waits: a short plan, a form just answered, a follow-up
NORMAL = 3
LONG = 4  # a long plan's step: batch work unless an admin says otherwise
BATCH = 5
PREEMPTIBLE_FROM = LONG  # a running run this unurgent gives its slot to urgent work
WaitKind = Literal["capacity", "agent", "tool", "budget"]


@dataclass(frozen=True, slots=True)
class RunRequest:
    """A run waiting for a slot (a dispatched step attempt, or a commander turn)."""

    key: str
    tenant: str
    agent: str
    enqueued_at: datetime
    priority: int = NORMAL
    tools: tuple[str, ...] = ()
    estimate_tokens: int = 0
    workspace: str = ""  # the tenant's workspace: shares are fair between these first


@dataclass(frozen=True, slots=True)
class Running:
    """A run holding a slot."""

    key: str
    tenant: str
    agent: str
    started_at: datetime
    priority: int = NORMAL
    tools: tuple[str, ...] = ()
    workspace: str = ""


@dataclass(frozen=True, slots=True)
class Budget:
    """Tokens a tenant may still spend in its period, and when the period starts again."""

    remaining: int
    resets_at: datetime | None = None
    label: str = "token budget"  # how the wait names it: "channel budget", "workspace budget"
    limit: int | None = None  # the whole period's budget: an estimate above it counts as it


@dataclass(frozen=True, slots=True)
class Limits:
    """Capacity, quotas, weights and budgets (settings, adjustable by admins)."""

    capacity: int
    agent_caps: Mapping[str, int] = field(default_factory=dict)
    tool_caps: Mapping[str, int] = field(default_factory=dict)
    # tenant or workspace -> weight (1.0)
    weights: Mapping[str, float] = field(default_factory=dict)
    # tenant or workspace -> budget (a run must fit both its channel's and its workspace's)
    budgets: Mapping[str, Budget] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Wait:
    """Why a run waits, as a person should read it on the plan card."""

    kind: WaitKind
    sentence: str


@dataclass(frozen=True, slots=True)
class Admission:
    """What one pass decided."""

    grants: tuple[str, ...] = ()
    waits: Mapping[str, Wait] = field(default_factory=dict)


def admit(
    waiting: Sequence[RunRequest],
    running: Sequence[Running],
    limits: Limits,
    now: datetime,
    served: Mapping[str, float] | None = None,
) -> Admission:
    """Grant free slots to waiting runs in fair order; say why the others wait. Pure.

    `served`: the runs each tenant was granted recently (e.g. in the last minutes, from
    the run requests' table) – the memory that keeps shares fair when runs finish between
    passes, so slots held at this instant are not the only measure.
    """
    slots: Counter[str] = Counter(r.tenant for r in running)
    slots.update(served or {})
    workspaces = _workspaces(waiting, running)
    for tenant, count in list(slots.items()):
        if tenant in workspaces and workspaces[tenant]:
            slots[_ws(workspaces[tenant])] += count
    agents = Counter(r.agent for r in running)
    tools = Counter(t for r in running for t in set(r.tools))
    spent: Counter[str] = Counter()
    free = limits.capacity - len(running)
    grants: list[str] = []
    waits: dict[str, Wait] = {}
    # The order changes only when a grant moves the shares: sorted once per grant, not
    # searched once per run (a pass over a long queue stays n·log n, not n²).
    pending = list(waiting)
    while pending:
        pending.sort(key=lambda r: _order(r, slots, limits))
        taken: int | None = None
        for position, candidate in enumerate(pending):
            blocked = _blocked(candidate, agents, tools, spent, limits, now)
            if blocked is not None:
                waits[candidate.key] = blocked
            elif free <= 0:
                waits[candidate.key] = _in_line(0)  # numbered once the order is known
            else:
                taken = position
                break
        if taken is None:
            break
        request, pending = pending[taken], pending[taken + 1 :]
        grants.append(request.key)
        free -= 1
        slots[request.tenant] += 1
        if request.workspace:
            slots[_ws(request.workspace)] += 1
        agents[request.agent] += 1
        tools.update(set(request.tools))
        spent[request.tenant] += request.estimate_tokens
        if request.workspace:
            spent[request.workspace] += request.estimate_tokens
    line = [k for k, w in waits.items() if w.kind == "capacity"]
    waits |= {key: _in_line(position) for position, key in enumerate(line, start=1)}
    return Admission(tuple(grants), waits)


def with_room(limits: Limits, held: int, held_here: int, process_capacity: int) -> Limits:
    """The limits of one pass in one process: the deployment's free slots, but no more than
    this process may still take (`held`: slots held now, `held_here`: by this process) – a
    process grants only runs it starts itself."""
    room = min(limits.capacity - held, process_capacity - held_here)
    return replace(limits, capacity=held + max(0, room))


def may_yield(holder_priority: int, waiter_priority: int, waiter_kind: str | None) -> bool:
    """Whether a running run gives its slot, at its next model-turn boundary, to a waiting
    one: the waiter is urgent, more urgent than the holder, and waits for nothing but a
    slot (no quota or budget it would still be held by); the holder is batch-like work
    (`PREEMPTIBLE_FROM`). Stored runs are asked in one statement
    (`storage/run_request_leases.py` `urgent_waits`, checked against this rule)."""
    return (
        holder_priority >= PREEMPTIBLE_FROM
        and waiter_priority <= URGENT
        and waiter_priority < holder_priority
        and waiter_kind == "capacity"
    )


def _ws(workspace: str) -> str:
    return f"workspace:{workspace}"  # a workspace's slots, apart from its tenants' keys


def _workspaces(waiting: Sequence[RunRequest], running: Sequence[Running]) -> dict[str, str]:
    out = {r.tenant: r.workspace for r in waiting}
    out.update((r.tenant, r.workspace) for r in running)
    return out


def _order(request: RunRequest, slots: Counter[str], limits: Limits) -> tuple[object, ...]:
    """Priority, then the workspace with the fewest slots per weight, then its channel
    with the fewest, then first come first served."""
    share = slots[request.tenant] / max(limits.weights.get(request.tenant, 1.0), 1e-9)
    workspace_share = 0.0
    if request.workspace:
        weight = max(limits.weights.get(request.workspace, 1.0), 1e-9)
        workspace_share = slots[_ws(request.workspace)] / weight
    return (request.priority, workspace_share, share, request.enqueued_at, request.key)


def _blocked(
    request: RunRequest,
    agents: Counter[str],
    tools: Counter[str],
    spent: Counter[str],
    limits: Limits,
    now: datetime,
) -> Wait | None:
    cap = limits.agent_caps.get(request.agent)
    if cap is not None and agents[request.agent] >= cap:
        return Wait("agent", f"waiting: {request.agent} busy ({agents[request.agent]}/{cap})")
    for tool in sorted(set(request.tools)):
        tool_cap = limits.tool_caps.get(tool)
        if tool_cap is not None and tools[tool] >= tool_cap:
            return Wait("tool", f"waiting: {tool} busy ({tools[tool]}/{tool_cap})")
    for scope in (request.tenant, request.workspace):
        budget = limits.budgets.get(scope) if scope else None
        need = request.estimate_tokens
        if budget is not None and budget.limit is not None:
            need = min(need, budget.limit)  # a run estimated above a whole period may still run
        if budget is not None and need > budget.remaining - spent[scope]:
            return Wait("budget", budget_sentence(budget, now))
    return None


def budget_sentence(budget: Budget, now: datetime, *, prefix: str = "waiting: ") -> str:
    """ "waiting: channel budget (resets 00:00 UTC)" – the date too when not today."""
    if budget.resets_at is None:
        return f"{prefix}{budget.label} used up"
    when = budget.resets_at.strftime("%H:%M UTC")
    if not timedelta(0) <= budget.resets_at - now <= timedelta(days=1):
        when = budget.resets_at.strftime("%d %b %H:%M UTC")
    return f"{prefix}{budget.label} (resets {when})"


def _in_line(position: int) -> Wait:
    return Wait("capacity", f"waiting: {in_line(position)}")


def in_line(position: int) -> str:
    """A place in line in words, exact for the first three and coarse behind them: a pass
    moves every place, and a card is edited only when the words it shows change (so a
    long queue's cards are not all rewritten at every grant)."""
    if position <= 1:
        return "next in line"
    if position <= 3:
        return f"{position}{'nd' if position == 2 else 'rd'} in line"
    if position <= 5:
        return "in line (a few ahead)"
    return "in line (5+ ahead)"
