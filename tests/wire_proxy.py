"""A loopback TCP proxy in front of PostgreSQL that counts protocol round trips.

`WireProxy(host, port)` listens on 127.0.0.1 (a free port) and forwards every connection
to the server. It reads the client's side of the frontend/backend protocol: after the
start-up packet every message is a type byte and a length. A round trip is a request the
client then waits on – a `Sync` (`S`, the end of an extended-query pipeline: asyncpg's
Parse/Bind/Execute), a simple `Query` (`Q`) or a `Flush` (`H`) – counted once until the
server answers, so a pipeline sent in one go is one round trip. An `SSLRequest` or
`GSSENCRequest` is answered "no" by the proxy itself, so the stream stays readable.

    async with WireProxy("127.0.0.1", 5432) as proxy:
        url = proxy.url("postgresql+asyncpg://postgres@127.0.0.1:5432/test")
        ...
        before = proxy.round_trips
"""

from __future__ import annotations

import asyncio
import struct
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104
_WAITS_FOR_SERVER = {ord("S"), ord("Q"), ord("H")}


class WireProxy:
    """Forwards 127.0.0.1:<port> to a PostgreSQL server and counts round trips."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.listen_port = 0
        self.round_trips = 0  # over all connections
        self.messages: dict[str, int] = {}  # client messages by type, over all connections
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def url(self, database_url: str) -> str:
        """`database_url` with its host and port replaced by the proxy's."""
        parts = urlsplit(database_url)
        userinfo = parts.netloc.rpartition("@")[0]
        netloc = (
            f"{userinfo}@127.0.0.1:{self.listen_port}"
            if userinfo
            else (f"127.0.0.1:{self.listen_port}")
        )
        return urlunsplit(parts._replace(netloc=netloc))

    async def __aenter__(self) -> WireProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.listen_port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        server_w: asyncio.StreamWriter | None = None
        try:
            startup = await self._startup(client_r, client_w)
            if startup is None:
                return
            server_r, server_w = await asyncio.open_connection(self.host, self.port)
            server_w.write(startup)
            waiting = [False]  # the client sent a request and waits for the answer
            upstream = asyncio.ensure_future(self._client_to_server(client_r, server_w, waiting))
            downstream = asyncio.ensure_future(self._server_to_client(server_r, client_w, waiting))
            done, pending = await asyncio.wait(
                {upstream, downstream}, return_when=asyncio.FIRST_COMPLETED
            )
            for other in pending:
                other.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            for writer in (client_w, server_w):
                if writer is not None:
                    writer.close()
            self._tasks.discard(task)

    async def _startup(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> bytes | None:
        """The client's start-up packet, after refusing encryption requests."""
        while True:
            head = await client_r.readexactly(8)
            length, code = struct.unpack("!ii", head)
            if code in (_SSL_REQUEST, _GSSENC_REQUEST) and length == 8:
                client_w.write(b"N")
                await client_w.drain()
                continue
            return head + await client_r.readexactly(length - 8)

    async def _client_to_server(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, waiting: list[bool]
    ) -> None:
        while True:
            head = await reader.readexactly(5)
            kind = head[0]
            (length,) = struct.unpack("!i", head[1:])
            body = await reader.readexactly(length - 4)
            name = chr(kind)
            self.messages[name] = self.messages.get(name, 0) + 1
            if kind in _WAITS_FOR_SERVER and not waiting[0]:
                waiting[0] = True
                self.round_trips += 1
            writer.write(head + body)
            await writer.drain()

    async def _server_to_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, waiting: list[bool]
    ) -> None:
        while data := await reader.read(65536):
            waiting[0] = False
            writer.write(data)
            await writer.drain()
