"""Address guard and DNS cache: the crawler must not become an SSRF tool.

A link (or a redirect) to ``http://169.254.169.254/`` or ``http://localhost:6379/``
would otherwise let any web page make the crawler talk to internal services. Every
host is resolved here and every address checked; the fetcher then connects to the
checked address (``crawl.fetch.pinning`` for HTTPS), so DNS cannot change the answer
between check and connection.

What is refused unless allowed:

* loopback (127/8, ::1): ``allow_loopback`` — what local sites, tests and the demo need;
* private networks (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7): ``allow_private``;
* everything else that is not globally routable — link-local 169.254/16 and fe80::/10
  (the cloud metadata address), multicast, reserved, unspecified — only through an
  explicit ``allowed_networks`` entry, never through a switch.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import logging
import re
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from core.errors import OutOfScope

logger = logging.getLogger(__name__)

__all__ = ["AddressGuard", "DnsCache", "Resolver", "is_public_address", "redact_addresses", "what_allows"]

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str], Awaitable[list[str]]]
"""Resolves a host name to its IP addresses (strings); raises ``OSError`` on failure."""

_PRIVATE_NETWORKS: tuple[IpNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)
_IPV4_TEXT = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
_IPV6_TEXT = re.compile(r"[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}(?:%\w+)?")


def redact_addresses(text: str) -> str:
    """``text`` with every IP address replaced by ``<address>``: reasons shown to the public
    must not map a host name to the internal address it resolved to."""
    return _IPV6_TEXT.sub("<address>", _IPV4_TEXT.sub("<address>", text))


async def system_resolver(host: str) -> list[str]:
    """Resolve with the OS resolver, without blocking the event loop."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_public_address(address: IpAddress) -> bool:
    """True for a globally routable unicast address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or not address.is_global
    )


@dataclass(frozen=True, slots=True)
class _CacheEntry:
    addresses: tuple[str, ...]
    expires_at: float


class DnsCache:
    """Positive and negative DNS answers kept for a while, one lookup per host in flight.

    Each new connection in httpx would otherwise resolve again; a crawl makes many
    connections to the same few hosts.
    """

    def __init__(
        self, resolver: Resolver = system_resolver, *, ttl_s: float = 300.0, negative_ttl_s: float = 30.0
    ) -> None:
        self._resolver = resolver
        self._ttl_s = ttl_s
        self._negative_ttl_s = negative_ttl_s
        self._entries: dict[str, _CacheEntry] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def resolve(self, host: str) -> tuple[str, ...]:
        """The host's addresses; an empty tuple when it does not resolve."""
        entry = self._entries.get(host)
        if entry is not None and entry.expires_at > time.monotonic():
            return entry.addresses
        lock = self._locks.setdefault(host, asyncio.Lock())
        async with lock:
            entry = self._entries.get(host)
            if entry is not None and entry.expires_at > time.monotonic():
                return entry.addresses
            try:
                addresses = tuple(await self._resolver(host))
                ttl = self._ttl_s
            except OSError as exc:
                logger.debug("DNS lookup for %s failed: %s", host, exc)
                addresses, ttl = (), self._negative_ttl_s
            self._entries[host] = _CacheEntry(addresses, time.monotonic() + ttl)
            return addresses


_VERDICTS_KEPT = 65_536
"""Addresses whose verdict a guard remembers (the settings behind a verdict never change)."""


@functools.lru_cache(maxsize=4096)
def _is_ip_literal(host: str) -> bool:
    """Whether a host is written as an IP address (parsing one costs ~5 µs, every fetch asks)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class AddressGuard:
    """Resolves a host and returns an address the crawler may connect to, or raises."""

    def __init__(
        self,
        dns: DnsCache,
        *,
        allow_loopback: bool = False,
        allow_private: bool = False,
        allowed_networks: Iterable[str] = (),
    ) -> None:
        self._dns = dns
        self._allow_loopback = allow_loopback
        self._allow_private = allow_private
        self._allowed: tuple[IpNetwork, ...] = tuple(
            ipaddress.ip_network(n, strict=False) for n in allowed_networks
        )
        self._verdicts: dict[str, bool] = {}

    def is_allowed_address(self, address: str) -> bool:
        """True when the crawl may connect to this IP address (remembered: every fetch asks)."""
        verdict = self._verdicts.get(address)
        if verdict is None:
            if len(self._verdicts) >= _VERDICTS_KEPT:
                self._verdicts.clear()
            verdict = self._verdicts[address] = self._judge(address)
        return verdict

    def _judge(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return False
        if any(ip in network for network in self._allowed):
            return True
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if ip.is_loopback:
            return self._allow_loopback
        if self._allow_private and any(ip in network for network in _PRIVATE_NETWORKS):
            return True
        return is_public_address(ip)

    async def checked_address(self, host: str) -> str:
        """An address of ``host`` that passed the guard.

        Raises ``OutOfScope`` when the host does not resolve or when any of its
        addresses is forbidden: a name that mixes public and private answers is a
        classic DNS-rebinding set-up, so one bad answer refuses the host.
        """
        bare = host.strip("[]")
        addresses: tuple[str, ...] = (bare,) if _is_ip_literal(bare) else await self._dns.resolve(bare)
        if not addresses:
            raise OutOfScope(f"Host {host!r} does not resolve; check the name or the network.")
        refused = [a for a in addresses if not self.is_allowed_address(a)]
        if refused:
            raise OutOfScope(
                f"Host {host!r} resolves to a non-public address {refused[0]}; "
                "pass --allow-loopback or --allow-private-networks, or allow the network, to crawl it."
            )
        return addresses[0]

    async def refused_address(self, host: str) -> str | None:
        """The first address of ``host`` the guard refuses; None when every one passes, or when
        the host does not resolve here (the crawler, maybe on another machine, decides then)."""
        bare = host.strip("[]")
        addresses: tuple[str, ...] = (bare,) if _is_ip_literal(bare) else await self._dns.resolve(bare)
        return next((a for a in addresses if not self.is_allowed_address(a)), None)


def what_allows(address: str) -> tuple[str, str]:
    """(kind of address, the setting that would let the crawl fetch it): the module doc's rules."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback:
        return "loopback", (
            "crawl.allow_loopback (TRAWL_CRAWL__ALLOW_LOOPBACK=true; trawl crawl --allow-loopback)"
        )
    if any(ip in network for network in _PRIVATE_NETWORKS):
        return "private-network", (
            "crawl.allow_private (TRAWL_CRAWL__ALLOW_PRIVATE=true; trawl crawl --allow-private-networks)"
        )
    kind = "link-local" if ip.is_link_local else "non-public"
    return kind, "crawl.allowed_networks (its CIDR block in TRAWL_CRAWL__ALLOWED_NETWORKS, a JSON list)"
