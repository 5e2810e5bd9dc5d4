"""Which addresses an agent's web fetch may connect to: public ones only.

A host is resolved once, every address it resolves to is checked, and the connection goes to
exactly those checked addresses (`GuardedResolver` is aiohttp's resolver, so there is no second
lookup an attacker's DNS could answer differently). Refused: unspecified, loopback, private,
link-local (cloud metadata lives there), multicast, reserved, shared (CGNAT) and any other
non-global address, for IPv4 and IPv6, with IPv4 carried inside IPv6 (mapped, compatible,
6to4, Teredo, NAT64) judged by the IPv4 it reaches.

`FetchPolicy.allow_networks` is the one way around the check, for tests that serve pages on
loopback: it is empty by default and never read from settings.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiohttp.abc import AbstractResolver, ResolveResult

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
# host name -> the addresses it resolves to (text form); raises OSError when it resolves to none
Resolve = Callable[[str], Awaitable[Sequence[str]]]

MAX_BYTES = 200_000
TIMEOUT_S = 15.0
MAX_REDIRECTS = 3

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_LINK_LOCAL = (ipaddress.IPv4Network("169.254.0.0/16"), ipaddress.IPv6Network("fe80::/10"))


class AddressRefused(Exception):
    """A host resolved to an address the fetch must not connect to."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        where = f"{host} is" if host == address else f"{host} resolves to {address},"
        super().__init__(f"{where} {reason}")
        self.host = host
        self.address = address
        self.reason = reason


async def system_resolve(host: str) -> Sequence[str]:
    """The addresses `host` resolves to with the system resolver (getaddrinfo)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """How an agent's web fetch resolves names, and its caps.

    `allow_networks` lets addresses in these networks through although they are not public:
    for tests serving pages on loopback only (link-local addresses stay refused even then).
    """

    resolve: Resolve = system_resolve
    allow_networks: tuple[IPNetwork, ...] = ()
    max_bytes: int = MAX_BYTES
    timeout_s: float = TIMEOUT_S
    max_redirects: int = MAX_REDIRECTS

    def refusal(self, address: str) -> str | None:
        """Why `address` may not be connected to under this policy, or None when it may."""
        ip = parse_address(address)
        if ip is None:
            return "not an IP address"
        if any(ip in net for net in _LINK_LOCAL):
            return "a link-local address"
        if any(ip.version == net.version and ip in net for net in self.allow_networks):
            return None
        return address_refusal(ip)


def parse_address(address: str) -> IPAddress | None:
    """`address` as an IP address (an IPv6 zone id dropped), or None if it is not one."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0].strip("[]"))
    except ValueError:
        return None
    return ip


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address delivers to (mapped, compatible, 6to4, Teredo, NAT64)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):  # NAT64 or IPv4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(ip: IPAddress) -> str | None:
    """Why `ip` is not a public address (a phrase), or None when it is one."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None:
            reason = address_refusal(inner)
            return f"an address carrying {inner}, {reason}" if reason else None
    checks = (
        (ip.is_unspecified, "the unspecified address"),
        (ip.is_loopback, "a loopback address"),
        (ip.is_link_local, "a link-local address"),
        (ip.is_multicast, "a multicast address"),
        (ip.is_private, "a private address"),
        (ip.is_reserved, "a reserved address"),
        (not ip.is_global, "not a public address"),
    )
    return next((reason for refused, reason in checks if refused), None)


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver for a fetch: resolves with the policy, refuses non-public answers.

    aiohttp connects to the addresses returned here, so the checked address is the one used.
    """

    def __init__(self, policy: FetchPolicy) -> None:
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await checked_addresses(host, self._policy)
        return [
            ResolveResult(
                hostname=host,
                host=str(ip),
                port=port,
                family=socket.AF_INET if ip.version == 4 else socket.AF_INET6,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for ip in addresses
        ]

    async def close(self) -> None:
        return None


async def checked_addresses(host: str, policy: FetchPolicy) -> list[IPAddress]:
    """The addresses of `host` (a name or an IP literal), all of them allowed by `policy`.

    Raises `AddressRefused` if any one is not (a host with one private answer is refused as a
    whole), `OSError` if the name does not resolve.
    """
    literal = parse_address(host)
    answers = [host] if literal is not None else list(await policy.resolve(host))
    if not answers:
        raise OSError(f"{host} does not resolve to any address")
    addresses: list[IPAddress] = []
    for answer in answers:
        reason = policy.refusal(answer)
        ip = parse_address(answer)
        if reason is not None or ip is None:
            raise AddressRefused(host, answer, reason or "not an IP address")
        addresses.append(ip)
    return addresses
