"""What the admission loop decides with: options, admins' overrides, priorities, budgets.

The settings (bot/settings.py) give `SchedulerOptions`; an admin's changes (`/flotilla
quota`, `/flotilla urgent|batch`) are stored in the workspace's settings under
`"scheduler"` and win over them. Budgets are checked against the usage ledger: what a
channel or the workspace spent since the start of the day or month (UTC).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlsplit

from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.scheduling.scheduler import (
    BATCH,
    INTERACTIVE,
    LONG,
    NORMAL,
    URGENT,
    Budget,
    Limits,
)
from flotilla.storage.usage import tokens_spent

BudgetPolicy = Literal["wait", "fail"]
BUDGET_KEYS = ("workspace_day", "workspace_month", "channel_day", "channel_month")
MARKS = {"urgent": URGENT, "batch": BATCH}


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    """Admission control (from the settings; admins override per workspace)."""

    capacity: int = 16  # concurrent agent runs across the deployment
    process_capacity: int = 8  # … and in one process
    agent_caps: Mapping[str, int] = field(default_factory=dict)  # "researcher": 2
    tool_caps: Mapping[str, int] = field(default_factory=dict)  # tool or "mcp:<host>": n
    weights: Mapping[str, float] = field(default_factory=dict)  # channel id -> weight
    budgets: Mapping[str, int] = field(default_factory=dict)  # BUDGET_KEYS -> tokens (0: none)
    budget_policy: BudgetPolicy = "wait"  # a run over budget waits, or its step fails
    batch_steps: int = 6  # a plan with more steps than this is batch work
    default_estimate: int = 2_000  # tokens a run of an agent with no history is expected to use
    poll_seconds: float = 2.0  # an admission pass at least this often (other processes' work)
    share_window: timedelta = timedelta(minutes=10)  # recent grants count towards shares
    preempt: bool = True  # urgent work takes a batch run's slot at a model-turn boundary


def with_overrides(options: SchedulerOptions, settings: Mapping[str, Any]) -> SchedulerOptions:
    """`options` with a workspace's stored admin overrides (`settings["scheduler"]`) applied."""
    stored = settings.get("scheduler") or {}

    def merged(name: str, base: Mapping[str, Any]) -> dict[str, Any]:
        both = {**base, **(stored.get(name) or {})}
        return {k: v for k, v in both.items() if v}  # 0: no cap (an admin removed it)

    return replace(
        options,
        capacity=int(stored.get("capacity", options.capacity)),
        agent_caps=merged("agent_caps", options.agent_caps),
        tool_caps=merged("tool_caps", options.tool_caps),
        weights=merged("weights", options.weights),
        budgets=merged("budgets", options.budgets),
    )


def marks_of(settings: Mapping[str, Any]) -> dict[str, str]:
    """Channels and plans an admin marked urgent or batch (`channel:C1`, `plan:12`)."""
    return dict((settings.get("scheduler") or {}).get("marks", {}))


def priority_of(
    kind: str,
    *,
    channel_id: str,
    plan_id: int | None,
    plan_steps: int,
    marks: Mapping[str, str],
    batch_steps: int,
) -> int:
    """1 urgent … 5 batch: an admin's mark first (plan, then channel); then a person
    waiting (a follow-up message, a form just answered, a plan's final answer) goes ahead;
    a long plan is batch."""
    for mark in (f"plan:{plan_id}", f"channel:{channel_id}"):
        if mark in marks and marks[mark] in MARKS:
            return MARKS[marks[mark]]
    if kind in ("commander_turn", "resume_step", "plan_finished"):  # a person waits for it
        return INTERACTIVE
    if plan_steps > batch_steps:
        return LONG
    return NORMAL


def quota_keys(tools: Iterable[str], mcp_servers: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """An agent's quota keys: its tools and `mcp:<host>` for each of its MCP servers. A tool
    given per domain (`http_fetch:<domain>`) counts as the tool too, so a cap on
    `http_fetch` holds for every agent that may fetch, and one on `http_fetch:<domain>` for
    that domain."""
    keys: dict[str, None] = {}
    for tool in tools:
        tool_name, _, domain = tool.partition(":")
        if domain and tool_name:
            keys[tool_name] = None
        keys[tool] = None
    hosts = (urlsplit(str(s.get("url", ""))).hostname or "unknown" for s in mcp_servers)
    keys |= {f"mcp:{host}": None for host in hosts}
    return tuple(keys)


def tenant_of(team_id: str, channel_id: str) -> str:
    return f"{team_id}:{channel_id}"


def limits_of(options: SchedulerOptions, budgets: Mapping[str, Budget]) -> Limits:
    """The pure core's limits; channel weights keyed by tenant."""
    return Limits(
        capacity=options.capacity,
        agent_caps=dict(options.agent_caps),
        tool_caps=dict(options.tool_caps),
        weights=dict(options.weights),
        budgets=dict(budgets),
    )


def weights_by_tenant(
    options: SchedulerOptions, tenants: Iterable[tuple[str, str]]
) -> dict[str, float]:
    """Channel weights (set by channel id) keyed as the core's tenants (`team:channel`)."""
    out: dict[str, float] = {}
    for team, channel in tenants:
        if channel in options.weights:
            out[tenant_of(team, channel)] = float(options.weights[channel])
        if team in options.weights:
            out[team] = float(options.weights[team])
    return out


def period_starts(now: datetime) -> tuple[datetime, datetime, datetime, datetime]:
    """Start of today, of tomorrow, of this month and of next month (UTC)."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    month = day.replace(day=1)
    next_month = (month + timedelta(days=32)).replace(day=1)
    return day, day + timedelta(days=1), month, next_month


async def budgets_now(
    conn: AsyncConnection,
    options: SchedulerOptions,
    tenants: Iterable[tuple[str, str]],
    now: datetime,
) -> dict[str, Budget]:
    """What each tenant (and its workspace) may still spend, from the usage ledger; the
    tighter of the day's and the month's budget, with when it resets."""
    limits = {k: int(options.budgets.get(k, 0) or 0) for k in BUDGET_KEYS}
    if not any(limits.values()):
        return {}  # no budgets: no ledger reads at all
    day, tomorrow, month, next_month = period_starts(now)
    out: dict[str, Budget] = {}
    for team, channel in set(tenants):
        for scope, key, channel_id in (
            ("workspace", team, None),
            ("channel", tenant_of(team, channel), channel),
        ):
            if key in out:
                continue
            found: list[Budget] = []
            for period, since, resets in (("day", day, tomorrow), ("month", month, next_month)):
                cap = limits[f"{scope}_{period}"]
                if cap:
                    spent = await tokens_spent(conn, team, since, channel_id=channel_id)
                    found.append(Budget(cap - spent, resets, label=f"{scope} budget", limit=cap))
            if found:
                out[key] = min(found, key=lambda b: b.remaining)
    return out


# --- a grant at once ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FastPath:
    """The caps a request is granted against at once, in its claim's own statement, when
    nobody waits (`storage/run_request_leases.py` `grant_at_once`): with no one in line and
    no budget or tool quota to weigh, `admit` grants it whenever the deployment, this
    process and its agent have a free slot (`with_room`; fair order and weights only rank
    waiting runs), so these three caps are all the claim checks – the statement grants
    exactly what `admit` would (`tests/integration/test_admission_one_rule.py`)."""

    capacity: int
    process_capacity: int
    agent_cap: int | None


def fast_path(options: SchedulerOptions, agent: str, tools: Sequence[str]) -> FastPath | None:
    """The caps for a grant at once; None when a tool quota or a budget must be weighed
    (then only an admission pass – `admit` – decides)."""
    if any(options.budgets.values()) or set(tools) & set(options.tool_caps):
        return None
    return FastPath(options.capacity, options.process_capacity, options.agent_caps.get(agent))
