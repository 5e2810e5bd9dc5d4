"""`http_fetch`: read a web page from a domain the agent is allowed to reach, within caps.

The allow-list is per agent (`http_fetch:<domain>` entries of its tools, see
`agents/registry.py`); a domain allows itself and its subdomains. Only http(s) on the
default ports, no redirects to elsewhere (each hop is checked), at most `MAX_BYTES` of body
and `TIMEOUT_S` seconds per fetch. Refusals and failures go back to the model as a tool
error it can act on, never as a run failure. Every request carries the tool call's
`Idempotency-Key` (see `agents/tools/context.py`): the same call fetched again after a crash
sends the same key.
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

import aiohttp
from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry

from agents.tools.context import IDEMPOTENCY_HEADER, RunDeps, call_key

MAX_BYTES = 200_000
TIMEOUT_S = 15.0
MAX_REDIRECTS = 3


def domain_allowed(url: str, allowed: tuple[str, ...]) -> bool:
    """True when `url` is http(s) and its host is an allowed domain or a subdomain of one."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower().rstrip(".")
    if parts.scheme not in ("http", "https") or not host:
        return False
    return any(host == d or host.endswith("." + d) for d in allowed)


async def http_fetch(ctx: RunContext[RunDeps], url: str) -> str:
    """Fetch a web page (text) from an allowed domain. Long pages are cut."""
    allowed = ctx.deps.http_domains
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    headers = {IDEMPOTENCY_HEADER: call_key(ctx)}
    async with aiohttp.ClientSession(timeout=timeout, headers=headers) as session:
        for _hop in range(MAX_REDIRECTS + 1):
            if not domain_allowed(url, allowed):
                domains = ", ".join(allowed) or "none"
                raise ModelRetry(f"{url} is not on this agent's allowed domains ({domains}).")
            try:
                async with session.get(url, allow_redirects=False) as response:
                    if response.status in (301, 302, 303, 307, 308):
                        url = urljoin(url, response.headers.get("Location", ""))
                        continue
                    body = await response.content.read(MAX_BYTES + 1)
                    text = body[:MAX_BYTES].decode(response.charset or "utf-8", errors="replace")
                    cut = " [cut: the page is longer]" if len(body) > MAX_BYTES else ""
                    return f"HTTP {response.status} from {url}{cut}\n\n{text}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise ModelRetry(f"Fetching {url} failed: {type(exc).__name__}.") from exc
    raise ModelRetry(f"{url} redirected more than {MAX_REDIRECTS} times.")
