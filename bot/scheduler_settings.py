"""The scheduler's admission control: capacities, per-agent, per-tool and per-channel shares,
token budgets (one part of `bot.settings.Settings`; admins adjust them with `/flotilla quota`)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AliasChoices, BaseModel, Field, field_validator
from pydantic_settings import NoDecode


class SchedulerSettings(BaseModel):
    """Capacities, concurrency caps, fair-share weights, token budgets and the poll interval."""

    scheduler_capacity: int = Field(
        default=16,
        ge=1,
        le=1000,
        validation_alias=AliasChoices("FLOTILLA_SCHEDULER_CAPACITY"),
        description="Concurrent agent runs (steps and commander turns) across the deployment.",
    )
    scheduler_process_capacity: int = Field(
        default=8,
        ge=1,
        le=1000,
        validation_alias=AliasChoices("FLOTILLA_SCHEDULER_PROCESS_CAPACITY"),
        description="Concurrent agent runs in one process.",
    )
    agent_concurrency: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("FLOTILLA_AGENT_CONCURRENCY"),
        description="Per-agent caps, e.g. `researcher: 2, writer: 1` (unlisted: no cap).",
    )
    tool_concurrency: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("FLOTILLA_TOOL_CONCURRENCY"),
        description="Per-tool or MCP-server caps, e.g. `http_fetch: 4, mcp:crm.example.com: 1`.",
    )
    channel_weights: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("FLOTILLA_CHANNEL_WEIGHTS"),
        description="Fair-share weights by channel id, e.g. `C0123: 2` (default 1).",
    )
    budget_workspace_day: int = Field(
        default=0, ge=0, validation_alias=AliasChoices("FLOTILLA_BUDGET_WORKSPACE_DAY")
    )
    budget_workspace_month: int = Field(
        default=0, ge=0, validation_alias=AliasChoices("FLOTILLA_BUDGET_WORKSPACE_MONTH")
    )
    budget_channel_day: int = Field(
        default=0, ge=0, validation_alias=AliasChoices("FLOTILLA_BUDGET_CHANNEL_DAY")
    )
    budget_channel_month: int = Field(
        default=0, ge=0, validation_alias=AliasChoices("FLOTILLA_BUDGET_CHANNEL_MONTH")
    )
    budget_policy: Literal["wait", "fail"] = Field(
        default="wait",
        validation_alias=AliasChoices("FLOTILLA_BUDGET_POLICY"),
        description="A run that would exceed a token budget waits for the reset, or its "
        "step fails.",
    )
    batch_plan_steps: int = Field(
        default=6,
        ge=1,
        validation_alias=AliasChoices("FLOTILLA_BATCH_PLAN_STEPS"),
        description="A plan with more steps than this is batch work (after interactive work).",
    )
    scheduler_poll_seconds: float = Field(
        default=2.0,
        gt=0,
        le=60,
        validation_alias=AliasChoices("FLOTILLA_SCHEDULER_POLL_SECONDS"),
        description="An admission pass at least this often (other processes' freed slots).",
    )

    @field_validator("agent_concurrency", "tool_concurrency", "channel_weights", mode="before")
    @classmethod
    def _split_pairs(cls, value: object) -> object:
        """`name: 2, other: 1` (or `name=2`) as a mapping."""
        if not isinstance(value, str):
            return value
        pairs: dict[str, str] = {}
        for part in value.split(","):
            if not part.strip():
                continue
            name, sep, number = part.replace("=", ":").rpartition(":")
            if not sep or not name.strip():
                raise ValueError(f"write `name: number` pairs separated by commas, not {part!r}")
            pairs[name.strip()] = number.strip()
        return pairs

    @field_validator("agent_concurrency", "tool_concurrency")
    @classmethod
    def _caps_in_range(cls, value: dict[str, int]) -> dict[str, int]:
        for name, cap in value.items():
            if not 0 <= cap <= 1000:
                raise ValueError(f"{name}: {cap} runs is not a cap: use 1 to 1000 (0: no cap)")
        return value

    @field_validator("channel_weights")
    @classmethod
    def _weights_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        for channel, weight in value.items():
            if not 0 < weight <= 1000:  # NaN and infinity too
                raise ValueError(f"{channel}: the weight must be above 0 and at most 1000")
        return value

    def budgets(self) -> dict[str, int]:
        """The token budgets by scope and period (0: none)."""
        return {
            "workspace_day": self.budget_workspace_day,
            "workspace_month": self.budget_workspace_month,
            "channel_day": self.budget_channel_day,
            "channel_month": self.budget_channel_month,
        }
