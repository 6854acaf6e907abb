"""The politeness slots of the other hosts a robots.txt redirect chain lands on.

RFC 9309 asks crawlers to follow robots.txt redirects across authorities (up to five
hops), so fetching one origin's robots.txt can mean a request to another host, often
``example.com`` → ``www.example.com``. That request is made in the *first* host's slot;
without more, it could overlap a fetch of the other host, or follow one sooner than its
delay allows (and on a fleet, another worker's fetch). So each such hop first takes the
other host's slot from the frontier (``borrow_host``: the same wait as a lease, across the
fleet on PostgreSQL), and the chain gives every slot back when it ends, with the time it
held it as the response time, so the host's next allowed time counts this request.

A host that stays busy longer than ``wait_s`` fails the hop as a timeout: the robots.txt
is then unreachable, which disallows its origin for ``robots_error_ttl_s`` before it is
asked again (RFC 9309 §2.3.1.4). Two chains that each hold the host the other waits for
end that way too, rather than waiting on each other.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from core.errors import FetchError, FetchFailure
from crawl.frontier.leases import Feedback
from crawl.urls import host_of

__all__ = ["HostSlots", "SlotLender"]


class SlotLender(Protocol):
    """The part of a frontier that lends a host's slot for a request that is none of its URLs."""

    async def borrow_host(self, host: str, *, wait_s: float) -> bool: ...

    def return_host(self, host: str, feedback: Feedback) -> None: ...


class HostSlots:
    """The slots one redirect chain holds beyond its own host's; ``enter`` is the fetcher's ``host_gate``."""

    def __init__(
        self,
        lender: SlotLender,
        own_host: str,
        *,
        wait_s: float,
        crawl_delay: Callable[[str], float] = lambda url: 0.0,
    ) -> None:
        self._lender = lender
        self._own_host = own_host
        self._wait_s = wait_s
        self._crawl_delay = crawl_delay
        self._held: dict[str, tuple[float, str]] = {}
        """Host → when its slot was taken (monotonic) and the first URL asked there."""

    async def enter(self, target: str) -> None:
        """Hold the slot of ``target``'s host before the chain asks it (a held one is kept)."""
        host = host_of(target)
        if host == self._own_host or host in self._held:
            return
        if not await self._lender.borrow_host(host, wait_s=self._wait_s):
            raise FetchError(
                target,
                f"{host} stayed busy for {self._wait_s:g} s (a robots.txt redirect waits for its slot)",
                FetchFailure.TIMEOUT,
            )
        self._held[host] = (time.monotonic(), target)

    def release(self) -> None:
        """Give every held slot back: each host's next allowed time counts the time it was held
        as its response time, and its Crawl-delay where its own robots.txt is known
        (``crawl_delay`` of the first URL asked there)."""
        now = time.monotonic()
        held, self._held = self._held, {}
        for host, (since, url) in held.items():
            feedback = Feedback(response_s=now - since, crawl_delay_s=self._crawl_delay(url))
            self._lender.return_host(host, feedback)
