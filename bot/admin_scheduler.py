"""Administration of the scheduler: `/flotilla quota` (budgets, weights, agent and tool
concurrency), `/flotilla queue` (who waits for what, and why) and `/flotilla urgent |
batch | normal` (a plan's or a channel's priority). Changes are validated, stored as the
workspace's overrides of the settings and audited; answers are sentences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flotilla.agents.scheduling.admission_policy import (
    BUDGET_KEYS,
    MARKS,
    SchedulerOptions,
    budgets_now,
    with_overrides,
)
from flotilla.agents.scheduling.scheduler import NORMAL
from flotilla.storage.audit import audit
from flotilla.storage.records import RunRequestRecord
from flotilla.storage.run_requests import queued_requests, reprioritize
from flotilla.storage.workspaces import set_workspace_settings, workspace_settings

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService

QUOTA_HELP = (
    "Say what to change: `/flotilla quota capacity 8` · `quota agent researcher 2` · "
    "`quota tool http_fetch 1` · `quota weight #channel 2` · "
    "`quota budget channel_day 50000` (" + ", ".join(BUDGET_KEYS) + "; 0 removes a cap)."
)
CHANNEL = re.compile(r"<#([CG][A-Z0-9]+)(?:\|[^>]*)?>|([CG][A-Z0-9]{2,})")
PRIORITY_NAMES = {1: "urgent", 2: "interactive", 3: "normal", 4: "long", 5: "batch"}


@dataclass(frozen=True, slots=True)
class QuotaChange:
    """One parsed `/flotilla quota KIND [NAME] VALUE`; `problem` when it was not understood."""

    kind: str = ""
    name: str = ""
    value: float = 0
    problem: str = ""


def parse_quota(words: list[str]) -> QuotaChange:
    """`capacity 8`, `agent researcher 2`, `tool http_fetch 1`, `weight #c 2`, `budget k n`."""
    if not words:
        return QuotaChange()
    kind, rest = words[0].lower(), words[1:]
    if kind == "capacity" and len(rest) == 1:
        name, number = "", rest[0]
    elif kind in ("agent", "tool", "weight", "budget") and len(rest) == 2:
        name, number = rest
    else:
        return QuotaChange(problem=QUOTA_HELP)
    try:
        value = float(number)
    except ValueError:
        return QuotaChange(problem=f"`{number}` is not a number. {QUOTA_HELP}")
    if value < 0 or (kind != "weight" and value != int(value)):
        return QuotaChange(problem=f"`{number}` must be a whole number, 0 or more.")
    if kind == "capacity" and value < 1:
        return QuotaChange(problem="The capacity must be at least 1 run.")
    if kind == "weight":
        match = CHANNEL.fullmatch(name)
        if match is None or value <= 0:
            return QuotaChange(problem="Say a channel and a weight above 0: `quota weight #c 2`.")
        name = match.group(1) or match.group(2)
    if kind == "budget" and name.lower() not in BUDGET_KEYS:
        return QuotaChange(problem=f"There is no budget `{name}`. {QUOTA_HELP}")
    return QuotaChange(kind, name.lower() if kind == "budget" else name, value)


async def set_quota(service: SlackService, user: str, change: QuotaChange) -> str:
    """Store an admin's quota change as the workspace's override (audited)."""
    if change.problem:
        return change.problem
    async with service.db.write() as conn:
        settings = await workspace_settings(conn, service.team_id)
        scheduler: dict[str, Any] = dict(settings.get("scheduler") or {})
        section = {"agent": "agent_caps", "tool": "tool_caps", "weight": "weights"}.get(
            change.kind, "budgets"
        )
        if change.kind == "capacity":
            scheduler["capacity"] = int(change.value)
        else:
            entries = dict(scheduler.get(section) or {})
            value: float = change.value if change.kind == "weight" else int(change.value)
            entries[change.name] = value
            scheduler[section] = entries
        await set_workspace_settings(conn, service.team_id, {**settings, "scheduler": scheduler})
        await audit(
            conn,
            team_id=service.team_id,
            actor=user,
            action=f"quota.{change.kind}",
            target=change.name or "deployment",
            details={"value": change.value},
            now=service.clock(),
        )
    service.executor.admission.changed()  # waiting runs are looked at again under the new limit
    return "Saved. " + await quota_text(service)


async def quota_text(service: SlackService) -> str:
    """The limits in force (settings with the workspace's overrides) and budgets left."""
    options = await _options(service)
    lines = [
        f"*Capacity*: {options.capacity} runs at once across the deployment, "
        f"{options.process_capacity} per process",
        "*Agents*: " + _pairs(options.agent_caps, "at a time"),
        "*Tools*: " + _pairs(options.tool_caps, "at a time"),
        "*Channel weights*: "
        + (", ".join(f"<#{c}> ×{w:g}" for c, w in options.weights.items()) or "all equal"),
        "*Budgets*: "
        + (
            ", ".join(
                f"{k.replace('_', ' per ')} {v:,} tokens" for k, v in options.budgets.items() if v
            )
            or "none"
        )
        + f" (over budget: {'the step fails' if options.budget_policy == 'fail' else 'it waits'})",
    ]
    async with service.db.read() as conn:
        left = await budgets_now(conn, options, [(service.team_id, "")], service.clock())
    workspace_left = left.get(service.team_id)
    if workspace_left is not None:
        lines.append(f"*Workspace budget left*: {max(0, workspace_left.remaining):,} tokens")
    return "\n".join(lines)


async def queue_text(service: SlackService) -> str:
    """Who waits for what, and why; and what runs now."""
    async with service.db.read() as conn:
        queue = [r for r in await queued_requests(conn) if r.team_id == service.team_id]
    if not queue:
        return "Nothing is waiting and nothing is running."
    running = [r for r in queue if r.state == "granted"]
    waiting = [r for r in queue if r.state != "granted"]
    lines = [f"*Running* ({len(running)})"] + [f"• {_what(r)}" for r in running]
    lines.append(f"*Waiting* ({len(waiting)})")
    lines += [f"• {_what(r)} – {r.wait_reason or 'waiting: being looked at'}" for r in waiting]
    return "\n".join(lines)


async def mark(
    service: SlackService, user: str, level: str, channel: str, plan_id: int | None
) -> str:
    """Mark a plan (or this channel) urgent, batch or normal (audited)."""
    target = f"plan:{plan_id}" if plan_id is not None else f"channel:{channel}"
    async with service.db.write() as conn:
        settings = await workspace_settings(conn, service.team_id)
        scheduler: dict[str, Any] = dict(settings.get("scheduler") or {})
        marks = dict(scheduler.get("marks") or {})
        if level == "normal":
            marks.pop(target, None)
        else:
            marks[target] = level
        scheduler["marks"] = marks
        await set_workspace_settings(conn, service.team_id, {**settings, "scheduler": scheduler})
        moved = await reprioritize(
            conn,
            MARKS.get(level, NORMAL),
            team_id=service.team_id,
            plan_id=plan_id,
            channel_id=None if plan_id is not None else channel,
        )
        await audit(
            conn,
            team_id=service.team_id,
            actor=user,
            action=f"priority.{level}",
            target=target,
            now=service.clock(),
        )
    service.executor.admission.changed()
    what = f"Plan {plan_id}" if plan_id is not None else f"<#{channel}>"
    waiting = f" ({moved} waiting run{'s' if moved != 1 else ''} moved)" if moved else ""
    return f"{what} is now {level} work{waiting}."


async def plan_waits(service: SlackService) -> dict[int, list[str]]:
    """Why steps of running plans wait (plan id -> "step 2 waiting: …")."""
    async with service.db.read() as conn:
        queue = await queued_requests(conn)
    out: dict[int, list[str]] = {}
    for r in queue:
        if r.plan_id is not None and r.state != "granted" and r.wait_reason:
            what = "final answer" if r.step_index is None else f"step {r.step_index}"
            out.setdefault(r.plan_id, []).append(f"{what} {r.wait_reason}")
    return out


async def _options(service: SlackService) -> SchedulerOptions:
    async with service.db.read() as conn:
        settings = await workspace_settings(conn, service.team_id)
    return with_overrides(service.options.scheduler, settings)


def _pairs(caps: Any, unit: str) -> str:
    return ", ".join(f"{name} {n} {unit}" for name, n in caps.items() if n) or "no caps"


def _what(r: RunRequestRecord) -> str:
    who = "the commander" if r.agent_name == "commander" else f"@{r.agent_name}"
    if r.plan_id is None:
        step = "a reply"
    elif r.step_index is None:  # its commander turn, or its final answer
        step = f"plan {r.plan_id} {'final answer' if r.effect_kind == 'plan_finished' else 'turn'}"
    else:
        step = f"plan {r.plan_id} step {r.step_index}"
    priority = PRIORITY_NAMES.get(r.priority, str(r.priority))
    return f"{step} – {who} in <#{r.channel_id}> ({priority})"
