"""A tiny round-robin HTTP proxy in front of the replicas, as a load balancer would be: each
request goes to the next replica; one that cannot be reached is skipped (the next is tried,
like nginx's `proxy_next_upstream error`), and 502 is answered when none answers."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import aiohttp
from aiohttp import web

HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


class RoundRobinProxy:
    def __init__(self, timeout: float = 10.0) -> None:
        self.backends: list[str] = []  # base URLs, e.g. http://127.0.0.1:8123
        self.statuses: Counter[int] = Counter()  # what the proxy answered Slack
        self.timeout = timeout
        self._turn = itertools.count()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url = ""

    async def start(self) -> str:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server) and server.sockets
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        return self.url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        backends = list(self.backends)
        start = next(self._turn)
        for i in range(len(backends)):
            backend = backends[(start + i) % len(backends)]
            try:
                async with (
                    asyncio.timeout(self.timeout),
                    self._session.request(
                        request.method, backend + request.path_qs, data=body, headers=headers
                    ) as answer,
                ):
                    payload = await answer.read()
                    self.statuses[answer.status] += 1
                    kept = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_HEADERS}
                    return web.Response(status=answer.status, body=payload, headers=kept)
            except aiohttp.ClientConnectionError:
                continue  # a killed replica: the next one
            except TimeoutError:
                break
        self.statuses[502] += 1
        return web.Response(status=502, text="no replica answered")
