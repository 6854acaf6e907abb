"""Trawl's exception tree.

::

    TrawlError
    ├─ ConfigError
    ├─ CrawlError ── FetchError(url, reason) · RobotsDenied · OutOfScope · TooLarge
    ├─ QueryError ── QuerySyntaxError(position)      → 400
    ├─ IndexStateError ── ManifestError · ShardUnavailable
    └─ ModelError ── ModelLoadError(path, reason)

Messages say what happened, the value, and what to do. The API maps ``QueryError``
to 400 and ``IndexStateError`` to 503; anything else reaching the user is a bug.
"""

from __future__ import annotations


class TrawlError(Exception):
    """Base of every error Trawl raises on purpose."""


class ConfigError(TrawlError):
    """A setting or a command-line option has a value Trawl cannot use."""


class CrawlError(TrawlError):
    """Something went wrong while crawling one URL."""


class FetchError(CrawlError):
    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"Fetching {url!r} failed: {reason}")
        self.url = url
        self.reason = reason


class RobotsDenied(CrawlError):
    """robots.txt forbids the URL."""


class OutOfScope(CrawlError):
    """The URL is outside the crawl's scope (host, path, depth or address guard)."""


class TooLarge(CrawlError):
    """The response body exceeded the configured cap."""


class QueryError(TrawlError):
    """The query or one of its parameters cannot be used. Maps to HTTP 400."""


class QuerySyntaxError(QueryError):
    def __init__(self, message: str, position: int | None = None) -> None:
        super().__init__(message)
        self.position = position


class IndexStateError(TrawlError):
    """The index on disk is missing, incomplete or of the wrong format."""


class ManifestError(IndexStateError):
    """An index or model manifest is missing or invalid."""


class ShardUnavailable(IndexStateError):
    """A shard did not answer in time or failed."""


class ModelError(TrawlError):
    """A model could not be used."""


class ModelLoadError(ModelError):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"Cannot load model from {path!r}: {reason}")
        self.path = path
        self.reason = reason
