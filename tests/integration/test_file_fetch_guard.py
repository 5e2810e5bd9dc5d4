"""Attachments are fetched with the bot token only from the allowed file host, and never past
the size cap – whatever `Content-Length` says (the body is streamed and counted)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.agents.reconciling.ports import FileRefused
from flotilla.bot.identities import Poster
from flotilla.bot.secrets import TokenCipher
from flotilla.bot.slack_files import allowed_origin
from flotilla.bot.slack_port import SlackPort

TOKEN = "xoxb-the-bot-token"
CAP = 64 * 1024


@dataclass
class RawServer:
    """A loopback HTTP server that answers every request with `reply(request_head)` bytes
    (lies included) and remembers what it was sent and how much of its answer was read."""

    reply: Callable[[bytes], list[bytes]]
    requests: list[bytes] = field(default_factory=list)
    written: int = 0
    origin: str = ""


@asynccontextmanager
async def raw_server(reply: Callable[[bytes], list[bytes]]) -> AsyncIterator[RawServer]:
    server = RawServer(reply)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            server.requests.append(head)
            for piece in server.reply(head):
                writer.write(piece)
                await writer.drain()
                server.written += len(piece)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up: what it read is what it read
        finally:
            writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    server.origin = f"http://127.0.0.1:{port}"
    try:
        yield server
    finally:
        listening.close()
        await listening.wait_closed()


def port_for(*origins: str) -> SlackPort:
    client = AsyncWebClient(token=TOKEN)
    return SlackPort(
        cast(Any, None),  # no database: fetching touches none
        client,
        Poster(client, "http://127.0.0.1:1/api/"),
        TokenCipher(TokenCipher.new_key()),
        lambda: datetime.now(UTC),
        file_origins=origins,
    )


def chunked(total: int, size: int = 16 * 1024) -> list[bytes]:
    pieces = [b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"]
    for start in range(0, total, size):
        body = b"x" * min(size, total - start)
        pieces.append(f"{len(body):x}\r\n".encode() + body + b"\r\n")
    return [*pieces, b"0\r\n\r\n"]


async def test_a_url_outside_the_file_host_is_never_fetched() -> None:
    async with raw_server(
        lambda _head: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"]
    ) as evil:
        port = port_for("https://files.slack.com")
        for url in (
            f"{evil.origin}/files-pri/T1-F1/prices.csv",
            f"{evil.origin.replace('http://', 'https://')}/x",
            "https://files.slack.com.evil.example/x",
            "https://files.slack.com@127.0.0.1/x",
            "file:///etc/passwd",
        ):
            with pytest.raises(FileRefused, match="not on Slack's file host"):
                await port.download_file(url, max_bytes=CAP)
        assert evil.requests == []  # not even a connection carried the token


async def test_the_token_goes_to_the_allowed_host_only() -> None:
    async with raw_server(
        lambda _head: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"]
    ) as host:
        assert await port_for(host.origin).download_file(f"{host.origin}/f", max_bytes=CAP) == b"hi"
        assert f"Authorization: Bearer {TOKEN}".encode() in host.requests[0]


async def test_a_redirect_is_not_followed_with_the_token() -> None:
    async with raw_server(
        lambda _head: [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno"]
    ) as evil:
        moved = f"HTTP/1.1 302 Found\r\nLocation: {evil.origin}/x\r\nContent-Length: 0\r\n\r\n"
        async with raw_server(lambda _head: [moved.encode()]) as host:
            with pytest.raises(FileRefused):
                await port_for(host.origin).download_file(f"{host.origin}/f", max_bytes=CAP)
        assert evil.requests == []


async def test_the_cap_holds_on_a_body_without_a_length() -> None:
    async with raw_server(lambda _head: chunked(4 * CAP)) as host:
        with pytest.raises(FileRefused, match="more than"):
            await port_for(host.origin).download_file(f"{host.origin}/f", max_bytes=CAP)


async def test_the_cap_holds_on_a_lying_content_length() -> None:
    lie = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n" + b"y" * (4 * CAP)
    async with raw_server(lambda _head: [lie]) as host:
        try:
            data = await port_for(host.origin).download_file(f"{host.origin}/f", max_bytes=CAP)
        except FileRefused:  # the bytes after the declared ones are not HTTP: refused
            return
    assert data == b"y" * 10  # only what was declared is read, never past the cap


async def test_a_body_until_close_is_cut_at_the_cap() -> None:
    until_close = [b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n", b"z" * (4 * CAP)]
    async with raw_server(lambda _head: until_close) as host:
        with pytest.raises(FileRefused, match="more than"):
            await port_for(host.origin).download_file(f"{host.origin}/f", max_bytes=CAP)


async def test_an_honest_length_over_the_cap_is_refused_before_the_body() -> None:
    honest = [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (4 * CAP), b"w" * (4 * CAP)]
    async with raw_server(lambda _head: honest) as host:
        with pytest.raises(FileRefused, match="more than the cap"):
            await port_for(host.origin).download_file(f"{host.origin}/f", max_bytes=CAP)


hosts = st.sampled_from(["files.slack.com", "evil.example", "files.slack.com.evil", "127.0.0.1"])


@settings(max_examples=200, deadline=None)
@given(
    scheme=st.sampled_from(["https", "http", "ftp", "HTTPS"]),
    user=st.sampled_from(["", "user@", "files.slack.com@", "a:b@"]),
    host=hosts,
    port=st.sampled_from(["", ":443", ":8443", ":80"]),
    path=st.text(alphabet="abc/.%@?#", max_size=12),
)
def test_only_the_exact_origin_is_allowed(
    scheme: str, user: str, host: str, port: str, path: str
) -> None:
    url = f"{scheme}://{user}{host}{port}/{path}"
    expected = (
        scheme.lower() == "https"
        and not user
        and host == "files.slack.com"
        and port in ("", ":443")
    )
    assert allowed_origin(url, ("https://files.slack.com",)) == expected
