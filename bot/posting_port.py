"""What the streamed answers and the native plan display need of the Slack port.

`SlackPort` (bot/slack_port.py) builds both and hands itself over; they see it through this
protocol, so neither imports the port that imports them.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

from slack_sdk.web.async_client import AsyncWebClient

from flotilla.agents.reconciling.ports import StepTag
from flotilla.bot.identities import Identity, Poster
from flotilla.bot.slack_features import SlackFeatures
from flotilla.storage.db import Database
from flotilla.storage.records import ConversationRecord


class PostingPort(Protocol):
    db: Database
    poster: Poster
    features: SlackFeatures
    team_id: str
    client: AsyncWebClient

    async def keep(
        self,
        conversation: ConversationRecord,
        ts: str,
        text: str,
        identity: Identity | None,
        metadata: dict[str, Any] | None,
    ) -> None: ...

    async def say(
        self,
        conversation: ConversationRecord,
        text: str,
        *,
        agent: str | None = None,
        result_of: StepTag | None = None,
        key: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str: ...

    def slack_call(self, identity: Identity | None) -> AbstractContextManager[None]: ...
