"""http_fetch cannot reach inside the network: the SSRF guard, seen from inside a step run.

Names are resolved by a table the test controls (`FetchPolicy.resolve`); every page is served
by a loopback aiohttp server, reachable only where a test passes the explicit test-only
allowance for 127.0.0.1. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import ip_address, ip_network

import pytest
from aiohttp import web
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.running.runtime import RunJob, StepRunResult, run_step
from flotilla.agents.tools.context import tool_call_key
from flotilla.agents.tools.net_guard import FetchPolicy, Resolve, address_refusal
from flotilla.agents.tools.registry import AgentSpec
from flotilla.storage.db import Database

PAGE = """<!doctype html><html><head><title>Acme pricing</title>
<script>document.write("not content")</script><style>p { color: red }</style></head>
<body><h1>Plans</h1><p>Acme Pro costs <b>42</b> &euro; a month.</p>
<ul><li>Support</li><li><a href="https://acme.example.com/terms">Terms</a></li></ul></body></html>"""


@dataclass
class Site:
    """A loopback server recording each request's path, Host and Idempotency-Key."""

    port: int = 0
    hits: list[tuple[str, str, str | None]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits.append((request.path, request.host, request.headers.get("Idempotency-Key")))
        if request.path == "/page":
            return web.Response(text=PAGE, content_type="text/html")
        if request.path == "/big":
            return web.Response(text="x" * 2_000_000)
        if request.path == "/to":
            raise web.HTTPFound(request.query["target"])
        raise web.HTTPNotFound()


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    recorder = Site()
    app = web.Application()
    app.router.add_get("/{name}", recorder.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    recorder.port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield recorder
    await runner.cleanup()


def names(table: Mapping[str, Sequence[str]]) -> Resolve:
    """A resolver answering from `table` only (an unknown name does not resolve)."""

    async def resolve(host: str) -> Sequence[str]:
        if host not in table:
            raise OSError(f"{host} is not in the test's name table")
        return table[host]

    return resolve


# test-only: the one address the loopback site may be reached on
LOOPBACK_ONLY = (ip_network("127.0.0.1/32"),)


def policy(
    table: Mapping[str, Sequence[str]], *, loopback: bool, max_bytes: int = 200_000
) -> FetchPolicy:
    allow = LOOPBACK_ONLY if loopback else ()
    return FetchPolicy(resolve=names(table), allow_networks=allow, max_bytes=max_bytes)


def spec(*domains: str) -> AgentSpec:
    return AgentSpec(
        "researcher", "Researcher", "", "r", tools=("http_fetch",), http_domains=domains
    )


@dataclass
class Fetching:
    """A model that calls `http_fetch(url)` once and answers with what the tool gave back."""

    url: str
    call_ids: list[str] = field(default_factory=list)

    def model(self) -> FunctionModel:
        def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            returns = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
            if not returns:
                call = ToolCallPart("http_fetch", {"url": self.url})
                self.call_ids.append(call.tool_call_id)
                return ModelResponse(parts=[call])
            return ModelResponse(parts=[TextPart(str(returns[0].content))])

        return FunctionModel(script)


async def fetch(
    db: Database, key: str, url: str, agent: AgentSpec, fetch_policy: FetchPolicy | None
) -> str:
    """What the agent read back from one `http_fetch(url)` call in a real step run."""
    result = await run_step(
        db,
        RunJob(run_key=key, team_id="T1", input="look it up"),
        agent,
        model=Fetching(url).model(),
        fetch_policy=fetch_policy,
    )
    assert isinstance(result, StepRunResult)
    return result.message


def assert_sentence(message: str) -> None:
    assert "Traceback" not in message and message.endswith(".") and "\n" not in message


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("127.0.0.1", "a loopback address"),
        ("169.254.169.254", "a link-local address"),
        ("::ffff:127.0.0.1", "carrying 127.0.0.1, a loopback address"),
        ("10.1.2.3", "a private address"),
    ],
)
async def test_a_permitted_domain_resolving_inside_is_refused(
    db: Database, site: Site, answer: str, reason: str
) -> None:
    url = f"http://docs.example.com:{site.port}/page"
    strict = policy({"docs.example.com": [answer]}, loopback=False)

    message = await fetch(db, f"in:{answer}", url, spec("example.com"), strict)

    assert message.startswith(f"{url} was refused: docs.example.com resolves to {answer}, ")
    assert reason in message and "only public addresses can be fetched" in message
    assert_sentence(message)
    assert site.hits == []  # refused before any connection


async def test_metadata_is_refused_even_with_an_allowance_that_covers_it(
    db: Database, site: Site
) -> None:
    broad = FetchPolicy(
        resolve=names({"docs.example.com": ["169.254.169.254"]}),
        allow_networks=(ip_network("169.254.0.0/16"), *LOOPBACK_ONLY),
    )
    url = f"http://docs.example.com:{site.port}/page"
    message = await fetch(db, "meta", url, spec("example.com"), broad)
    assert "169.254.169.254, a link-local address" in message and site.hits == []


async def test_one_private_answer_among_public_ones_refuses_the_host(
    db: Database, site: Site
) -> None:
    mixed = policy({"docs.example.com": ["93.184.216.34", "127.0.0.1"]}, loopback=False)
    url = f"http://docs.example.com:{site.port}/page"
    message = await fetch(db, "mixed", url, spec("example.com"), mixed)
    assert "resolves to 127.0.0.1, a loopback address" in message and site.hits == []


@pytest.mark.parametrize(
    ("target", "refused"),
    [
        (
            "http://internal.example.com/admin",
            "internal.example.com resolves to 10.0.0.7, a private",
        ),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"),
        (
            "http://[::ffff:a9fe:a9fe]/latest/",
            "::ffff:a9fe:a9fe is an address carrying 169.254.169.254, a link-local",
        ),
        ("http://[::1]:{port}/page", "::1 is a loopback address"),
        ("http://127.0.0.2:{port}/page", "127.0.0.2 is a loopback address"),
    ],
)
async def test_a_redirect_to_an_inside_address_is_refused(
    db: Database, site: Site, target: str, refused: str
) -> None:
    target = target.replace("{port}", str(site.port))
    table = {"docs.example.com": ["127.0.0.1"], "internal.example.com": ["10.0.0.7"]}
    agent = spec("example.com", "169.254.169.254", "::ffff:a9fe:a9fe", "::1", "127.0.0.2")
    url = f"http://docs.example.com:{site.port}/to?target={target}"

    message = await fetch(db, f"redirect:{target}", url, agent, policy(table, loopback=True))

    assert refused in message and "only public addresses can be fetched" in message
    assert_sentence(message)
    assert [path for path, _, _ in site.hits] == ["/to"]  # the first hop only


async def test_an_oversized_body_is_cut_and_says_so(db: Database, site: Site) -> None:
    capped = policy({"docs.example.com": ["127.0.0.1"]}, loopback=True, max_bytes=1000)
    url = f"http://docs.example.com:{site.port}/big"
    message = await fetch(db, "big", url, spec("example.com"), capped)
    head, _, body = message.partition("\n\n")
    assert head == f"HTTP 200 from {url} [cut: the page is longer]"
    assert body == "x" * 1000


async def test_a_page_comes_back_as_markdown_with_the_idempotency_key(
    db: Database, site: Site
) -> None:
    allowed = policy({"docs.example.com": ["127.0.0.1"]}, loopback=True)
    url = f"http://docs.example.com:{site.port}/page"
    model = Fetching(url)
    result = await run_step(
        db,
        RunJob(run_key="page:1", team_id="T1", input="look it up"),
        spec("example.com"),
        model=model.model(),
        fetch_policy=allowed,
    )
    assert isinstance(result, StepRunResult)
    assert result.message == (
        f"HTTP 200 from {url}\n\nTitle: Acme pricing\n\n# Plans\n\nAcme Pro costs 42 € a month."
        "\n\n- Support\n- [Terms](https://acme.example.com/terms)"
    )
    # connected to the address the guard checked, with the name as Host, and the call's key
    key = tool_call_key("page:1", model.call_ids[0])
    assert site.hits == [("/page", f"docs.example.com:{site.port}", key)]


async def test_a_name_is_resolved_once_per_hop_and_that_answer_is_used(
    db: Database, site: Site
) -> None:
    asked: list[str] = []

    async def rebinding(host: str) -> Sequence[str]:
        asked.append(host)  # a rebinding server: allowed first, inside afterwards
        return ["127.0.0.1"] if len(asked) == 1 else ["10.0.0.7"]

    once = FetchPolicy(resolve=rebinding, allow_networks=LOOPBACK_ONLY)
    url = f"http://docs.example.com:{site.port}/page"
    message = await fetch(db, "rebind", url, spec("example.com"), once)
    assert message.startswith(f"HTTP 200 from {url}") and "Acme Pro costs 42" in message
    assert asked == ["docs.example.com"] and len(site.hits) == 1


async def test_by_default_the_system_resolver_is_used_and_loopback_is_refused(
    db: Database, site: Site
) -> None:
    url = f"http://localhost:{site.port}/page"
    message = await fetch(db, "default:localhost", url, spec("localhost"), None)
    assert message.startswith(f"{url} was refused: localhost resolves to ")
    assert "a loopback address" in message and site.hits == []


@pytest.mark.parametrize("host", ["2130706433", "127.1", "0x7f.0.0.1"])
async def test_numeric_spellings_of_loopback_are_not_fetched(
    db: Database, site: Site, host: str
) -> None:
    url = f"http://{host}:{site.port}/page"
    message = await fetch(db, f"numeric:{host}", url, spec(host), None)
    assert "was refused" in message or message == f"{url} is not a web address that can be fetched."
    assert_sentence(message)
    assert site.hits == []


@pytest.mark.parametrize(
    "address",
    [
        "0.0.0.0",
        "10.0.0.1",
        "100.64.0.1",
        "127.0.0.1",
        "169.254.169.254",
        "172.16.0.1",
        "192.168.1.1",
        "192.0.2.1",
        "198.18.0.1",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "fe80::1",
        "fc00::1",
        "fd00:ec2::254",
        "ff02::1",
        "2001:db8::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::127.0.0.1",
        "2002:7f00:1::1",
        "64:ff9b::a9fe:a9fe",
        "2001:0:4136:e378:8000:63bf:80ff:fffe",
    ],
)
def test_inside_addresses_are_refused(address: str) -> None:
    assert address_refusal(ip_address(address)) is not None


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:93.184.216.34"]
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert address_refusal(ip_address(address)) is None
