"""How Flotilla posts as each agent: its own Slack app, or a persona of the commander's app.

- Own app: the agent's bot token (decrypted from storage) posts; dispatches mention the
  agent's bot user for real (`<@U…>`).
- Persona: the commander's token posts with the agent's display name and icon
  (`chat:write.customize`); the mention is plain text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from flotilla.agents.core.lru import LRUCache
from flotilla.agents.core.retry_policy import (
    SLACK_CALL_RATE_LIMITED_RETRIES,
    SLACK_CALL_SERVER_ERROR_RETRIES,
)
from flotilla.bot.channel_pacing import ChannelPacer
from flotilla.bot.secrets import TokenCipher
from flotilla.storage.records import AgentRecord

COMMANDER_NAME = "Flotilla"
CLIENT_CACHE_SIZE = 256  # Web API clients kept, one per agent app token


class CachingWebClient(AsyncWebClient):
    """A Web API client that asks `auth.test` once: who its token is does not change, and
    the service's start, Bolt's authorization and the admin views all ask."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._auth: AsyncSlackResponse | None = None

    async def auth_test(self, **kwargs: Any) -> AsyncSlackResponse:
        if kwargs:
            return await super().auth_test(**kwargs)
        if self._auth is None:
            self._auth = await super().auth_test()  # an error is raised, not kept
        return self._auth


def make_client(token: str | None, base_url: str) -> AsyncWebClient:
    """A Web API client that also waits out 429s (Retry-After) and retries 5xx answers, and
    asks `auth.test` once."""
    client = CachingWebClient(token=token, base_url=base_url)
    rate_limited = AsyncRateLimitErrorRetryHandler(max_retry_count=SLACK_CALL_RATE_LIMITED_RETRIES)
    client.retry_handlers.append(rate_limited)
    server_error = AsyncServerErrorRetryHandler(max_retry_count=SLACK_CALL_SERVER_ERROR_RETRIES)
    client.retry_handlers.append(server_error)
    return client


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a message is posted as. `token` is set for agents with their own app only."""

    name: str
    display_name: str
    icon: str = ""
    kind: str = "persona"  # "persona" | "app" | "commander"
    bot_user_id: str | None = None
    bot_id: str | None = None
    token: SecretStr | None = field(default=None, repr=False)

    @property
    def mention(self) -> str:
        if self.kind == "app" and self.bot_user_id:
            return f"<@{self.bot_user_id}>"
        return f"@{self.name}"

    def persona_arguments(self) -> dict[str, Any]:
        """username/icon arguments for chat.postMessage (persona posts only)."""
        if self.kind != "persona":
            return {}
        arguments: dict[str, Any] = {"username": self.display_name or self.name}
        icon = self.icon.strip()
        if icon.startswith(":") and icon.endswith(":") and len(icon) > 2:
            arguments["icon_emoji"] = icon
        elif icon.startswith(("https://", "http://")):
            arguments["icon_url"] = icon
        return arguments


class Poster:
    """Posts and edits messages in threads as the commander or as an agent identity."""

    def __init__(
        self,
        commander: AsyncWebClient,
        base_url: str,
        *,
        on_client: Callable[[AsyncWebClient], None] | None = None,
        client_cache_size: int = CLIENT_CACHE_SIZE,
        pacer: ChannelPacer | None = None,
    ) -> None:
        """`on_client` sees every client this poster makes (an agent app's), e.g. to meter
        its Web API calls like the commander's; `pacer` paces new messages per channel."""
        self.commander = commander
        self._base_url = base_url
        self._on_client = on_client
        # token -> client; bounded: rotated tokens leave their old client behind
        self._clients: LRUCache[str, AsyncWebClient] = LRUCache(client_cache_size)
        self.pacer = pacer or ChannelPacer(None, 1)

    @property
    def base_url(self) -> str:
        """The Web API's base URL (Slack's, or the local workspace's)."""
        return self._base_url

    def client_for(self, identity: Identity | None) -> AsyncWebClient:
        if identity is None or identity.kind != "app" or identity.token is None:
            return self.commander
        token = identity.token.get_secret_value()
        client = self._clients.get(token)
        if client is None:
            client = make_client(token, self._base_url)
            self._clients.put(token, client)
            if self._on_client is not None:
                self._on_client(client)
        return client

    async def post(
        self,
        *,
        channel: str,
        thread_ts: str | None,
        text: str,
        identity: Identity | None = None,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Post a message (in its channel's turn) and return its ts."""
        extra = identity.persona_arguments() if identity else {}
        await self.pacer.wait(channel)
        response = await self.client_for(identity).chat_postMessage(
            channel=channel,
            thread_ts=thread_ts,
            text=text,
            blocks=blocks,
            metadata=metadata,
            unfurl_links=False,
            **extra,
        )
        return str(response["ts"])

    async def update(
        self,
        *,
        channel: str,
        ts: str,
        text: str,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Edit a message the commander posted (plan cards, answered forms)."""
        await self.commander.chat_update(
            channel=channel, ts=ts, text=text, blocks=blocks, metadata=metadata
        )


def identity_of(agent: AgentRecord, cipher: TokenCipher) -> Identity:
    """How to post as (and mention) an agent: its own app, or a persona of ours."""
    token = None
    if agent.identity == "app" and agent.bot_token_encrypted:
        token = SecretStr(cipher.decrypt(agent.bot_token_encrypted))
    return Identity(
        name=agent.name,
        display_name=agent.display_name,
        icon=agent.icon,
        kind="app" if token is not None else "persona",
        bot_user_id=agent.bot_user_id,
        bot_id=agent.bot_id,
        token=token,
    )
