"""robots.txt policies (RFC 9309 status handling, caps, Crawl-delay, sitemaps) and the cache."""

from __future__ import annotations

import asyncio
from pathlib import Path

from core.errors import FetchError
from crawl.fetch.robots import MAX_ROBOTS_BYTES, RobotsCache, agent_token, policy_from_response
from crawl.state.sqlite import CrawlDb

RULES = b"""User-agent: OtherBot
Disallow: /

User-agent: *
Disallow: /private/
Allow: /private/open
Crawl-delay: 2.5
Sitemap: https://a.com/sitemap.xml
"""


def test_rules_apply_on_2xx() -> None:
    policy = policy_from_response("https://a.com", 200, RULES, now=100.0, ttl_s=50, error_ttl_s=5)
    assert policy.mode == "rules" and policy.expires_at == 150.0
    assert policy.can_fetch("https://a.com/public", "TrawlBot")
    assert not policy.can_fetch("https://a.com/private/x", "TrawlBot")
    assert policy.can_fetch("https://a.com/private/open", "TrawlBot")
    assert not policy.can_fetch("https://a.com/public", "OtherBot")
    assert policy.crawl_delay("TrawlBot") == 2.5
    assert policy.sitemaps == ("https://a.com/sitemap.xml",)


def test_4xx_allows_everything_and_5xx_or_unreachable_denies_for_a_while() -> None:
    for status in (401, 403, 404, 410):
        policy = policy_from_response("https://a.com", status, b"", now=0, ttl_s=50, error_ttl_s=5)
        assert (policy.mode, policy.can_fetch("https://a.com/x", "TrawlBot")) == ("allow_all", True)
    for status in (0, 500, 503):
        policy = policy_from_response("https://a.com", status, b"", now=0, ttl_s=50, error_ttl_s=5)
        assert (policy.mode, policy.expires_at) == ("deny_all", 5)
        assert not policy.can_fetch("https://a.com/x", "TrawlBot")


def test_body_is_capped_at_500_kib() -> None:
    body = b"User-agent: *\n" + b"#" * MAX_ROBOTS_BYTES + b"\nDisallow: /\n"
    policy = policy_from_response("https://a.com", 200, body, now=0, ttl_s=50, error_ttl_s=5)
    assert policy.can_fetch("https://a.com/x", "TrawlBot")


def test_agent_token() -> None:
    assert agent_token("TrawlBot/0.1 (+https://x; y@z)") == "TrawlBot"


def test_cache_fetches_once_per_origin_and_persists(tmp_path: Path) -> None:
    calls: list[str] = []

    async def fetch(url: str) -> tuple[int, bytes]:
        calls.append(url)
        await asyncio.sleep(0.01)
        return 200, RULES

    async def scenario(db: CrawlDb) -> list[bool]:
        cache = RobotsCache(fetch, user_agent="TrawlBot/0.1", ttl_s=3600, store=db)
        return list(
            await asyncio.gather(
                cache.is_allowed("https://a.com/private/x"),
                cache.is_allowed("https://a.com/ok"),
                cache.is_allowed("https://a.com/private/open"),
            )
        )

    db = CrawlDb(tmp_path / "f.sqlite")
    assert asyncio.run(scenario(db)) == [False, True, True]
    assert calls == ["https://a.com/robots.txt"]
    assert asyncio.run(scenario(db)) == [False, True, True]  # a new cache reads the stored policy
    assert calls == ["https://a.com/robots.txt"]
    db.close()


def test_unreachable_robots_disallows() -> None:
    async def fetch(url: str) -> tuple[int, bytes]:
        raise FetchError(url, "connect: ConnectError")

    cache = RobotsCache(fetch, user_agent="TrawlBot", error_ttl_s=30)
    policy = asyncio.run(cache.policy("http://down.example"))
    assert policy.mode == "deny_all" and policy.status == 0


def test_an_answer_seen_on_a_redirect_is_learned_once_and_kept(tmp_path: Path) -> None:
    """``learn``: another origin's robots.txt met at the end of a redirect chain is that origin's
    policy too (stored, so it is not asked again), but never replaces a fresh one."""
    calls: list[str] = []

    async def fetch(url: str) -> tuple[int, bytes]:
        calls.append(url)
        return 404, b""

    db = CrawlDb(tmp_path / "f.sqlite")
    cache = RobotsCache(fetch, user_agent="TrawlBot/0.1", ttl_s=3600, store=db)
    cache.learn("https://www.a.com", 200, RULES)
    cache.learn("https://www.a.com", 404, b"")  # a fresh policy is kept
    assert not asyncio.run(cache.is_allowed("https://www.a.com/private/x"))
    assert calls == []
    again = RobotsCache(fetch, user_agent="TrawlBot/0.1", ttl_s=3600, store=db)
    assert again.cached("https://www.a.com") is not None and again.cached("https://www.a.com").mode == "rules"  # type: ignore[union-attr]
    db.close()
