"""`http_fetch`: read a web page from a domain the agent is allowed to reach, within caps.

The allow-list is per agent (`http_fetch:<domain>` entries of its tools, see
`agents/tools/registry.py`); a domain allows itself and its subdomains. On top of it, the fetch
only connects to public addresses (`agents/tools/net_guard.py`): a host is resolved once,
every address is checked (private, loopback, link-local, metadata… are refused) and the
connection goes to the checked address. Each redirect hop is checked the same way (allow-list
and addresses), at most `max_redirects` of them. At most `max_bytes` of body are read (a
longer page is cut and says so) and HTML is turned into markdown-like text. Refusals and
failures go back to the model as a sentence it can act on (`ModelRetry`), never as a run
failure. Every request carries the tool call's `Idempotency-Key` (see
`agents/tools/context.py`): the same call fetched again after a crash sends the same key.
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

import aiohttp
from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry

from flotilla.agents.tools.context import IDEMPOTENCY_HEADER, RunDeps, call_key
from flotilla.agents.tools.html_text import html_to_text
from flotilla.agents.tools.net_guard import (
    AddressRefused,
    FetchPolicy,
    GuardedResolver,
    parse_address,
)

REDIRECTS = (301, 302, 303, 307, 308)
_TEXT_TYPES = ("application/json", "application/xml", "application/javascript")


def domain_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """True when `url` is http(s) and its host is an allowed domain or a subdomain of one."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme not in ("http", "https") or not host:
        return False
    return any(host == d or host.endswith("." + d) for d in allowed)


async def http_fetch(ctx: RunContext[RunDeps], url: str) -> str:
    """Fetch a web page (as text) from an allowed domain. Long pages are cut."""
    return await fetch_page(url, ctx.deps.http_domains, call_key(ctx), ctx.deps.fetch_policy)


async def fetch_page(
    url: str, allowed: tuple[str, ...], idempotency_key: str, policy: FetchPolicy
) -> str:
    """The page at `url` as text for the model; raises `ModelRetry` with a sentence if refused.

    Every hop must be on `allowed` and resolve to addresses `policy` allows.
    """
    timeout = aiohttp.ClientTimeout(total=policy.timeout_s)
    headers = {IDEMPOTENCY_HEADER: idempotency_key}
    # the guarded resolver is the only resolver, and its answers are not cached across calls
    connector = aiohttp.TCPConnector(resolver=GuardedResolver(policy), use_dns_cache=False)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=headers, trust_env=False
    ) as session:
        for _hop in range(policy.max_redirects + 1):
            try:
                check_target(url, allowed, policy)
                async with session.get(url, allow_redirects=False) as response:
                    if response.status in REDIRECTS:
                        url = urljoin(url, response.headers.get("Location", ""))
                        continue
                    return await page_text(url, response, policy.max_bytes)
            except AddressRefused as exc:
                raise ModelRetry(
                    f"{url} was refused: {exc}; only public addresses can be fetched."
                ) from None
            except aiohttp.InvalidURL:
                raise ModelRetry(f"{url} is not a web address that can be fetched.") from None
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                raise ModelRetry(f"Fetching {url} failed: {type(exc).__name__}.") from None
    raise ModelRetry(f"{url} redirected more than {policy.max_redirects} times.")


def check_target(url: str, allowed: tuple[str, ...], policy: FetchPolicy) -> None:
    """Refuse a hop before any connection: off the allow-list, or an IP literal not allowed.

    Host names are checked where they are resolved (`GuardedResolver`); aiohttp does
    not resolve IP literals, so they are checked here.
    """
    if not domain_allowed(url, allowed):
        domains = ", ".join(allowed) or "none"
        raise ModelRetry(f"{url} is not on this agent's allowed domains ({domains}).")
    host = urlsplit(url).hostname or ""
    reason = policy.refusal(host) if parse_address(host) is not None else None
    if reason is not None:
        raise AddressRefused(host, host, reason)


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """At most `limit` bytes of the body (`read(n)` may return fewer than are coming)."""
    body = bytearray()
    while len(body) < limit:
        chunk = await response.content.read(limit - len(body))
        if not chunk:
            break
        body += chunk
    return bytes(body)


async def page_text(url: str, response: aiohttp.ClientResponse, max_bytes: int) -> str:
    """The response as the model reads it: status line, then text (HTML as markdown), capped."""
    body = await read_capped(response, max_bytes + 1)
    declared = "Content-Type" in response.headers
    media_type = response.content_type.lower() if declared else ""
    cut = " [cut: the page is longer]" if len(body) > max_bytes else ""
    head = f"HTTP {response.status} from {url}{cut}"
    textual = not media_type or media_type.startswith("text/") or media_type in _TEXT_TYPES
    if not textual and not media_type.endswith(("+json", "+xml")):
        return f"{head}\n\nThe page is {media_type}, not text: nothing to show."
    try:
        text = body[:max_bytes].decode(response.charset or "utf-8", errors="replace")
    except LookupError:  # a charset name Python does not know
        text = body[:max_bytes].decode("utf-8", errors="replace")
    if media_type in ("text/html", "application/xhtml+xml") or (
        not media_type and text.lstrip().startswith("<")
    ):
        text = html_to_text(text)
    return f"{head}\n\n{text}"
