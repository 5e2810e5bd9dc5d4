"""How the live thread is written: streamed answers, the pace of new messages per channel and
the native plan display (one part of `bot.settings.Settings`)."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field


class LiveThreadSettings(BaseModel):
    """Streaming interval, channel pacing and the native plan display."""

    stream_append_seconds: float = Field(
        default=1.5,
        ge=0,
        le=60,
        validation_alias=AliasChoices("FLOTILLA_STREAM_APPEND_SECONDS"),
        description="An answer streamed into a thread grows at most this often (seconds).",
    )

    channel_posts_per_second: float = Field(
        default=1.0,
        ge=0,
        le=50,
        validation_alias=AliasChoices("FLOTILLA_CHANNEL_POSTS_PER_SECOND"),
        description="New messages per second per channel, sustained (0: not paced).",
    )
    channel_post_burst: int = Field(
        default=2,
        ge=1,
        le=20,
        validation_alias=AliasChoices("FLOTILLA_CHANNEL_POST_BURST"),
        description="New messages one channel may get at once after a quiet spell.",
    )

    native_plan_display: bool = Field(
        default=True,
        validation_alias=AliasChoices("FLOTILLA_NATIVE_PLAN_DISPLAY"),
        description="Show each plan also as Slack's native plan display where the workspace "
        "has it (the card then shows the plan's start and end).",
    )
