"""http_fetch within a step run: per-agent domain allow-list, size cap, redirects checked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from ipaddress import ip_network

import pytest
from aiohttp import web
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.running.runtime import RunJob, StepRunResult, run_step
from flotilla.agents.tools.http_fetch import domain_allowed
from flotilla.agents.tools.net_guard import FetchPolicy
from flotilla.agents.tools.registry import AgentSpec
from flotilla.storage.db import Database


@pytest.fixture
async def site() -> AsyncIterator[str]:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text="Acme Pro costs 42")

    async def big(request: web.Request) -> web.Response:
        return web.Response(text="x" * 5000)

    async def away(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://localhost:9/elsewhere")

    app = web.Application()
    app.router.add_get("/page", page)
    app.router.add_get("/big", big)
    app.router.add_get("/away", away)
    runner = web.AppRunner(app)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


# test-only: the site runs on loopback, which the fetch refuses unless told otherwise
LOOPBACK = FetchPolicy(allow_networks=(ip_network("127.0.0.1/32"),))


def fetching(url: str) -> FunctionModel:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("http_fetch", {"url": url})])
        return ModelResponse(parts=[TextPart(str(returns[0].content))])

    return FunctionModel(script)


def spec(*domains: str) -> AgentSpec:
    return AgentSpec(
        "researcher", "Researcher", "", "research", tools=("http_fetch",), http_domains=domains
    )


def job(key: str) -> RunJob:
    return RunJob(run_key=key, team_id="T1", input="look it up")


async def test_an_allowed_domain_is_fetched(db: Database, site: str) -> None:
    result = await run_step(
        db, job("f1"), spec("127.0.0.1"), model=fetching(f"{site}/page"), fetch_policy=LOOPBACK
    )
    assert isinstance(result, StepRunResult) and "Acme Pro costs 42" in result.message


async def test_other_domains_and_redirects_to_them_are_refused(db: Database, site: str) -> None:
    refused = await run_step(
        db, job("f2"), spec("example.com"), model=fetching(f"{site}/page"), fetch_policy=LOOPBACK
    )
    assert "not on this agent's allowed domains" in refused.message  # type: ignore[union-attr]
    redirected = await run_step(
        db, job("f3"), spec("127.0.0.1"), model=fetching(f"{site}/away"), fetch_policy=LOOPBACK
    )
    assert "localhost" in redirected.message and "not on this agent" in redirected.message  # type: ignore[union-attr]


async def test_the_body_is_capped(db: Database, site: str) -> None:
    capped = FetchPolicy(allow_networks=LOOPBACK.allow_networks, max_bytes=1000)
    result = await run_step(
        db, job("f4"), spec("127.0.0.1"), model=fetching(f"{site}/big"), fetch_policy=capped
    )
    assert isinstance(result, StepRunResult)
    assert "[cut" in result.message and result.message.count("x") == 1000


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://docs.example.com/a", True),
        ("https://example.com", True),
        ("https://badexample.com", False),
        ("ftp://example.com/x", False),
        ("https://example.com.evil.net/", False),
    ],
)
def test_domain_allow_list(url: str, ok: bool) -> None:
    assert domain_allowed(url, ("example.com",)) is ok
