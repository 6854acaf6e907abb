"""robots.txt per RFC 9309, parsed by protego, cached per origin with a TTL.

The outcome of fetching robots.txt decides everything (RFC 9309 §2.3.1):

* 2xx: the rules apply (body capped at 500 KiB, the minimum the RFC asks parsers to
  read); ``Crawl-delay`` and ``Sitemap:`` lines are kept.
* 4xx ("unavailable"): no rules, everything is allowed. So is a redirect chain that
  ends without a robots.txt (a loop, more than five hops, a ``file:`` or other
  unfollowable target; §2.3.1.2), stored with status 300.
* 5xx or unreachable: everything is disallowed, and the origin is asked again after
  ``error_ttl_s`` rather than the full TTL.

Policies survive restarts in the crawl database, so a resumed crawl does not ask
every host again and ``trawl inspect`` can explain a decision offline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

from protego import Protego

from core.errors import CrawlError, FetchError
from crawl.urls import origin_of

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_ROBOTS_BYTES",
    "RobotsCache",
    "RobotsPolicy",
    "RobotsStore",
    "agent_token",
    "policy_from_response",
]

MAX_ROBOTS_BYTES = 500 * 1024
REDIRECT_UNFOLLOWED = 300
"""The status stored for a robots.txt whose redirects led nowhere fetchable."""
RobotsMode = Literal["rules", "allow_all", "deny_all"]
RobotsFetch = Callable[[str], Awaitable[tuple[int, bytes]]]
"""GETs a robots.txt URL; returns ``(status, body)`` or raises ``CrawlError``."""


def agent_token(user_agent: str) -> str:
    """The product token robots.txt groups match against: ``TrawlBot`` of ``TrawlBot/0.1 (...)``."""
    return user_agent.split("/", 1)[0].split()[0] if user_agent.strip() else "*"


@dataclass(frozen=True, slots=True)
class RobotsPolicy:
    """What one origin's robots.txt allows, and until when we believe it."""

    origin: str
    mode: RobotsMode
    status: int
    """HTTP status of robots.txt; 0 when it could not be fetched."""
    fetched_at: float
    expires_at: float
    body: str = ""
    parser: Protego | None = field(default=None, compare=False, repr=False)

    def can_fetch(self, url: str, agent: str) -> bool:
        if self.mode == "allow_all":
            return True
        if self.mode == "deny_all" or self.parser is None:
            return False
        return bool(self.parser.can_fetch(url, agent))

    def crawl_delay(self, agent: str) -> float:
        """Seconds between requests asked for by ``Crawl-delay`` (0 when none)."""
        if self.parser is None:
            return 0.0
        delay = self.parser.crawl_delay(agent)
        return float(delay) if delay else 0.0

    @property
    def sitemaps(self) -> tuple[str, ...]:
        return tuple(self.parser.sitemaps) if self.parser is not None else ()

    def is_fresh(self, now: float) -> bool:
        return self.expires_at > now


def policy_from_response(
    origin: str, status: int, body: bytes, *, now: float, ttl_s: float, error_ttl_s: float
) -> RobotsPolicy:
    """Turn a robots.txt fetch outcome into a policy (status 0 = unreachable)."""
    if 200 <= status < 300:
        text = body[:MAX_ROBOTS_BYTES].decode("utf-8", errors="replace")
        return RobotsPolicy(origin, "rules", status, now, now + ttl_s, body=text, parser=Protego.parse(text))
    if 300 <= status < 500:
        return RobotsPolicy(origin, "allow_all", status, now, now + ttl_s)
    return RobotsPolicy(origin, "deny_all", status, now, now + error_ttl_s)


class RobotsStore(Protocol):
    """Where policies persist between runs (the crawl database)."""

    def load_robots(self, origin: str) -> tuple[int, str, float, float] | None: ...

    def save_robots(self, policy: RobotsPolicy) -> None: ...


class RobotsCache:
    """One policy per origin, fetched once (one fetch in flight per origin), kept for a TTL."""

    def __init__(
        self,
        fetch: RobotsFetch,
        *,
        user_agent: str,
        ttl_s: float = 86_400.0,
        error_ttl_s: float = 600.0,
        store: RobotsStore | None = None,
    ) -> None:
        self._fetch = fetch
        self.agent = agent_token(user_agent)
        self._ttl_s = ttl_s
        self._error_ttl_s = error_ttl_s
        self._store = store
        self._policies: dict[str, RobotsPolicy] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def cached(self, origin: str) -> RobotsPolicy | None:
        """The fresh policy for an origin if one is known without a fetch."""
        now = time.time()
        policy = self._policies.get(origin)
        if policy is not None and policy.is_fresh(now):
            return policy
        if self._store is not None:
            row = self._store.load_robots(origin)
            if row is not None:
                status, body, fetched_at, expires_at = row
                if expires_at > now:
                    policy = _policy_from_row(origin, status, body, fetched_at, expires_at)
                    self._policies[origin] = policy
                    return policy
        return None

    async def policy(self, origin: str) -> RobotsPolicy:
        """The origin's policy, fetching robots.txt when none is fresh."""
        policy = self.cached(origin)
        if policy is not None:
            return policy
        lock = self._locks.setdefault(origin, asyncio.Lock())
        async with lock:
            policy = self.cached(origin)
            if policy is not None:
                return policy
            try:
                status, body = await self._fetch(f"{origin}/robots.txt")
            except FetchError as exc:
                if exc.kind.permanent:
                    logger.info("robots.txt of %s unavailable (%s): allowing", origin, exc.reason)
                    status, body = REDIRECT_UNFOLLOWED, b""
                else:
                    logger.warning("robots.txt of %s unreachable (%s): disallowing for now", origin, exc)
                    status, body = 0, b""
            except CrawlError as exc:
                logger.warning("robots.txt of %s unreachable (%s): disallowing for now", origin, exc)
                status, body = 0, b""
            policy = policy_from_response(
                origin, status, body, now=time.time(), ttl_s=self._ttl_s, error_ttl_s=self._error_ttl_s
            )
            self._policies[origin] = policy
            if self._store is not None:
                self._store.save_robots(policy)
            logger.debug("robots.txt of %s: %s (%s)", origin, policy.mode, status)
            return policy

    def learn(self, origin: str, status: int, body: bytes) -> None:
        """Keep ``origin``'s robots.txt answer seen on the way to another origin's (a redirect
        chain that ended at it), unless a fresh policy is known already: no second request."""
        if self.cached(origin) is not None:
            return
        policy = policy_from_response(
            origin, status, body, now=time.time(), ttl_s=self._ttl_s, error_ttl_s=self._error_ttl_s
        )
        self._policies[origin] = policy
        if self._store is not None:
            self._store.save_robots(policy)

    async def is_allowed(self, url: str) -> bool:
        """True when robots.txt lets this crawler fetch the canonical URL."""
        return (await self.policy(origin_of(url))).can_fetch(url, self.agent)


def _policy_from_row(
    origin: str, status: int, body: str, fetched_at: float, expires_at: float
) -> RobotsPolicy:
    if 200 <= status < 300:
        return RobotsPolicy(origin, "rules", status, fetched_at, expires_at, body, Protego.parse(body))
    if 300 <= status < 500:
        return RobotsPolicy(origin, "allow_all", status, fetched_at, expires_at)
    return RobotsPolicy(origin, "deny_all", status, fetched_at, expires_at)
