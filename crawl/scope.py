"""What the crawl may fetch: hosts or domains, path patterns, depth and trap limits.

Scope is decided on canonical URLs before a URL enters the frontier and again on
every redirect hop, so a redirect cannot take the crawler somewhere a link could not.
The trap limits (URL length, path depth, repeated segments, query size) bound the
endless spaces a site can generate (calendars, session loops, faceted search) even
before the per-host page budget does.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from crawl.urls import canonicalize_url, host_of

__all__ = ["Scope", "ScopeMode"]

ScopeMode = Literal["host", "domain", "any"]


def _bare_host(host_port: str) -> str:
    host = host_port.rsplit(":", 1)[0] if not host_port.endswith("]") else host_port
    return host


@dataclass(frozen=True, slots=True)
class Scope:
    """The crawl's boundary. ``mode="host"`` keeps to the seeds' hosts (with ports);
    ``"domain"`` also allows their subdomains (a leading ``www.`` is ignored);
    ``"any"`` allows every host (the address guard and budgets still apply)."""

    mode: ScopeMode = "host"
    hosts: frozenset[str] = frozenset()
    allow_paths: tuple[re.Pattern[str], ...] = ()
    deny_paths: tuple[re.Pattern[str], ...] = ()
    max_depth: int = 10
    max_url_chars: int = 2048
    max_path_segments: int = 24
    max_repeated_segment: int = 3
    max_query_params: int = 12

    @classmethod
    def from_seeds(
        cls,
        seeds: Iterable[str],
        *,
        mode: ScopeMode = "host",
        max_depth: int = 10,
        allow_paths: Iterable[str] = (),
        deny_paths: Iterable[str] = (),
    ) -> Scope:
        """Scope around the seeds' hosts (or domains); patterns are regexes on the path."""
        hosts: set[str] = set()
        for seed in seeds:
            canonical = canonicalize_url(seed)
            if not canonical:
                continue
            host = host_of(canonical)
            if mode == "domain":
                bare = _bare_host(host)
                hosts.add(bare[4:] if bare.startswith("www.") else bare)
            else:
                hosts.add(host)
        return cls(
            mode=mode,
            hosts=frozenset(hosts),
            allow_paths=tuple(re.compile(p) for p in allow_paths),
            deny_paths=tuple(re.compile(p) for p in deny_paths),
            max_depth=max_depth,
        )

    def out_of_scope_reason(self, url: str, depth: int = 0) -> str:
        """Why a canonical URL is out of scope, or ``""`` when it is in scope."""
        if not url:
            return "not an http(s) URL"
        if depth > self.max_depth:
            return f"depth {depth} > max_depth {self.max_depth}"
        if len(url) > self.max_url_chars:
            return f"URL longer than {self.max_url_chars} characters"
        host = host_of(url)
        if self.mode == "host" and host not in self.hosts:
            return f"host {host} not in scope"
        if self.mode == "domain":
            bare = _bare_host(host)
            if not any(bare == d or bare.endswith("." + d) for d in self.hosts):
                return f"host {bare} not under the scope's domains"
        rest = url.partition("://")[2]
        path = "/" + rest.split("/", 1)[1] if "/" in rest else "/"
        path_only, _, query = path.partition("?")
        if self.allow_paths and not any(p.search(path) for p in self.allow_paths):
            return "path matches no allow pattern"
        if any(p.search(path) for p in self.deny_paths):
            return "path matches a deny pattern"
        segments = [s for s in path_only.split("/") if s]
        if len(segments) > self.max_path_segments:
            return f"more than {self.max_path_segments} path segments (likely a trap)"
        if (
            len(segments) > self.max_repeated_segment
            and len(set(segments)) < len(segments)
            and Counter(segments).most_common(1)[0][1] > self.max_repeated_segment
        ):
            return "a path segment repeats too often (likely a trap)"
        if query and query.count("&") + 1 > self.max_query_params:
            return f"more than {self.max_query_params} query parameters (likely a trap)"
        return ""

    def contains(self, url: str, depth: int = 0) -> bool:
        """True when a canonical URL at ``depth`` may be crawled."""
        return not self.out_of_scope_reason(url, depth)
