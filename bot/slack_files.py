"""Files through Slack: attachments fetched with the bot token, files uploaded into a thread.

Fetching: only from the configured file origins (Slack's file host; the local workspace's
own address), never following a redirect, the body streamed and counted so a lying or
missing `Content-Length` cannot carry more than the cap. Uploading: Slack's external
upload in its three calls (`files.getUploadURLExternal`, the bytes, then
`files.completeUploadExternal`) rather than `files_upload_v2`, which does all three in one:
the file id Slack returns first is stored before any byte is sent, so a process that dies
half-way finds the upload again instead of uploading twice (`agents/file_uploads.py`).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.agents.core.errors import TransientError
from flotilla.agents.reconciling.ports import FileRefused, PostingRefused
from flotilla.agents.tools.file_policy import human_size
from flotilla.bot.identities import Identity, Poster
from flotilla.bot.slack_errors import slack_call

if TYPE_CHECKING:
    from flotilla.storage.records import ConversationRecord

log = logging.getLogger(__name__)
CHUNK = 64 * 1024
TIMEOUT = aiohttp.ClientTimeout(total=60, sock_connect=10)
_DEFAULT_PORTS = {"https": 443, "http": 80}


def origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a URL, lower-cased, the port made explicit; None if unusable."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username or parts.password:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def allowed_origin(url: str, origins: tuple[str, ...]) -> bool:
    """Whether `url` is on one of `origins` (e.g. `https://files.slack.com`), exactly."""
    found = origin_of(url)
    return found is not None and any(found == origin_of(o) for o in origins)


async def fetch_capped(url: str, token: str | None, max_bytes: int) -> bytes:
    """GET `url` with the bot token, at most `max_bytes` of body, counted as it streams."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as session,
        session.get(url, headers=headers, allow_redirects=False) as response,
    ):
        if response.status == 429 or response.status >= 500:
            raise TransientError(f"the file host answered {response.status}")
        if response.status != 200:
            raise FileRefused(f"Slack did not give me the file (HTTP {response.status})")
        declared = response.content_length
        if declared is not None and declared > max_bytes:
            raise FileRefused(f"it is {human_size(declared)}, more than the cap")
        received = bytearray()
        async for chunk in response.content.iter_chunked(CHUNK):
            received += chunk
            if len(received) > max_bytes:  # whatever Content-Length said
                raise FileRefused(f"it is more than the {human_size(max_bytes)} I take")
        return bytes(received)


class FileTransfers(ABC):
    """The file half of `SlackPort` (a mixin: it uses the port's client, poster, identities)."""

    file_origins: tuple[str, ...]
    client: AsyncWebClient
    poster: Poster

    @abstractmethod
    async def identity(self, name: str) -> Identity:
        """The identity an agent posts under (`SlackPort.identity`)."""

    async def download_file(self, url: str, *, max_bytes: int) -> bytes:
        """An attachment's bytes, fetched with the bot token from an allowed origin only."""
        if not allowed_origin(url, self.file_origins):
            log.warning("refused to fetch a file outside the allowed file hosts: %.200s", url)
            raise FileRefused("its address is not on Slack's file host")
        try:
            return await fetch_capped(url, self.client.token, max_bytes)
        except aiohttp.ClientResponseError as exc:  # not HTTP as it should be: no retry helps
            raise FileRefused(
                "the file host's answer could not be read", public="Slack's answer was unreadable"
            ) from exc
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransientError(f"the file host could not be reached ({exc!r})") from exc

    async def _uploader(self, agent: str | None) -> tuple[AsyncWebClient, Identity | None]:
        identity = await self.identity(agent) if agent else None
        return self.poster.client_for(identity), identity

    async def start_upload(self, *, name: str, size: int, agent: str | None) -> tuple[str, str]:
        """Slack's file id and upload URL for a new file (nothing is shared yet)."""
        client, _identity = await self._uploader(agent)
        with slack_call():
            response = await client.files_getUploadURLExternal(filename=name, length=size)
        return str(response["file_id"]), str(response["upload_url"])

    async def send_upload(self, upload_url: str, data: bytes) -> bool:
        """POST the bytes to the upload URL; False when the URL no longer takes them."""
        try:
            async with (
                aiohttp.ClientSession(timeout=TIMEOUT) as session,
                session.post(upload_url, data=data) as response,
            ):
                if response.status == 429 or response.status >= 500:
                    raise TransientError(f"the upload answered {response.status}")
                return response.status == 200
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransientError(f"the upload could not be sent ({exc!r})") from exc

    async def complete_upload(
        self,
        conversation: ConversationRecord,
        file_id: str,
        *,
        title: str,
        agent: str | None,
    ) -> str | None:
        """Share an uploaded file into the thread; its permalink (None if Slack gave none)."""
        client, identity = await self._uploader(agent)
        extra = identity.persona_arguments() if identity is not None else {}
        app = identity.display_name if identity is not None and identity.kind == "app" else None
        with slack_call(app):
            response = await client.files_completeUploadExternal(
                files=[{"id": file_id, "title": title}],
                channel_id=conversation.channel_id,
                thread_ts=conversation.thread_ts,
                **extra,
            )
        files = response.get("files") or [{}]
        return str(files[0].get("permalink") or "") or None

    async def shared_permalink(
        self, conversation: ConversationRecord, file_id: str, *, agent: str | None
    ) -> str | None:
        """The permalink of a file already shared in the conversation's channel, else None."""
        client, _identity = await self._uploader(agent)
        try:
            with slack_call():
                response = await client.files_info(file=file_id)
        except PostingRefused:  # file_not_found and the like: not shared
            return None
        file = response.get("file") or {}
        shares = file.get("shares") or {}
        channels = {
            channel for kind in shares.values() if isinstance(kind, dict) for channel in kind
        }
        if conversation.channel_id in channels or conversation.channel_id in (
            file.get("channels") or []
        ) + (file.get("groups") or []):
            return str(file.get("permalink") or "") or None
        return None
