"""``TrawlError``'s tree and the API's HTTP status for each (a subclass: its nearest listed ancestor's)::

├─ ConfigError → 400 bad_request ── BadDocument → 400 bad_document · CrawlDataMissing → 404 not_enabled
├─ CrawlError ── FetchError(url, reason) · RobotsDenied · OutOfScope · TooLarge
├─ QueryError → 400 bad_query ── BadParameter → 400 bad_parameter · BadClick → 400 bad_click
│    · DocumentNotFound → 404 not_found · UnknownGeneration → 404 unknown_generation
│    · NothingToRollBack → 409 nothing_to_roll_back · UnknownImpression → 404 unknown_impression
├─ AdminDenied ── AdminKeyRejected → 401 unauthorized · AdminDisabled → 403 forbidden
├─ BodyTooLarge → 413 too_large (middleware) · ExperimentsDisabled → 503 experiments_unavailable
├─ IndexStateError → 503 index_unavailable ── ManifestError · ShardUnavailable · DamagedFile
│    · IndexDamaged → 409 index_damaged (a publish refusing a generation with a damaged file)
├─ DirectoryBusy → 409 directory_busy · StorageError → 503 storage_unavailable: DiskFull, DatabaseUnavailable
├─ PushRejected ── PushKeyRejected → 403 key_not_valid · PushUrlsRejected → 422 urls_not_of_host
│    · PushHostNotCrawled → 422 host_not_crawled · PushThrottled → 429 too_many_requests
└─ ModelError ── ModelLoadError(path, reason)
"""

from __future__ import annotations

from enum import StrEnum


class TrawlError(Exception):
    """Base of every error Trawl raises on purpose.

    Messages say what happened, the value, and what to do; anything else reaching the user is a bug.
    """

    exit_status = 2
    """What a ``trawl`` command exits with (``cli.failures``): 2 when the command cannot run as
    given (a path, an option, a setting), as for a usage error; 1 when the work itself failed."""


class ConfigError(TrawlError):
    """A setting or a command-line option has a value Trawl cannot use."""


class BadDocument(ConfigError):
    """A given document (a JSON Lines line, a pushed document) is not one: names the field and where."""


class CrawlDataMissing(ConfigError):
    """An endpoint needs the crawl data directory (``api.crawl_data``), which is not configured.

    A public endpoint that a deployment does not offer (IndexNow without a crawl to feed) is
    404, not 503: nothing will change by retrying, and a 5xx would read as a fault."""


class PushDisabled(CrawlDataMissing):
    """The document push API is off: no ``api.push_data`` directory is configured (HTTP 404)."""


class CrawlError(TrawlError):
    """Something went wrong while crawling one URL."""


class FetchFailure(StrEnum):
    """What kind of fetch failure: the crawl counts and retries by kind, never by message text."""

    TIMEOUT = "timeout"
    CONNECT = "connect"
    READ = "read"
    TOO_MANY_REDIRECTS = "too_many_redirects"
    REDIRECT_LOOP = "redirect_loop"
    BAD_REDIRECT = "bad_redirect"
    """A ``Location`` that is not an http(s) URL (``javascript:``, ``file:``, garbage)."""
    BAD_ENCODING = "bad_encoding"
    OTHER = "other"

    @property
    def permanent(self) -> bool:
        """True when asking again cannot help: the same answer would come back."""
        return self in _PERMANENT_FAILURES


_PERMANENT_FAILURES = frozenset(
    {FetchFailure.TOO_MANY_REDIRECTS, FetchFailure.REDIRECT_LOOP, FetchFailure.BAD_REDIRECT}
)


class FetchError(CrawlError):
    def __init__(self, url: str, reason: str, kind: FetchFailure = FetchFailure.OTHER) -> None:
        super().__init__(f"Fetching {url!r} failed: {reason}")
        self.url = url
        self.reason = reason
        self.kind = kind


class RobotsDenied(CrawlError):
    """robots.txt forbids the URL."""


class OutOfScope(CrawlError):
    """The URL is outside the crawl's scope (host, path, depth or address guard)."""


class TooLarge(CrawlError):
    """The response body exceeded the configured cap."""


class QueryError(TrawlError):
    """The query or one of its parameters cannot be used. Maps to HTTP 400."""


class BadParameter(QueryError):
    """A request parameter is not a value the API takes (out of range, not a whole number)."""


class BadClick(QueryError):
    """A click that does not match its impression (wrong doc id or position)."""


class DocumentNotFound(QueryError):
    """No document with that id in the serving generation."""


class UnknownGeneration(QueryError):
    """An admin request names a generation the index root does not hold (HTTP 404)."""


class NothingToRollBack(QueryError):
    """A rollback with no earlier published generation to return to (HTTP 409)."""


class UnknownImpression(QueryError):
    """A click names an impression this service never showed (or has forgotten)."""


class AdminDenied(TrawlError):
    """An admin endpoint refused the request."""


class AdminKeyRejected(AdminDenied):
    """The ``X-API-Key`` header is missing or wrong."""


class AdminDisabled(AdminDenied):
    """No admin key is configured, so admin endpoints are off."""


class BodyTooLarge(TrawlError):
    """A streamed request body went past the limit (no Content-Length was sent)."""


class IndexStateError(TrawlError):
    """The index on disk is missing, incomplete or of the wrong format."""


class ManifestError(IndexStateError):
    """An index or model manifest is missing or invalid."""


class ShardUnavailable(IndexStateError):
    """A shard did not answer in time or failed."""


class DamagedFile(IndexStateError):
    """A stored file (a docstore or link-graph segment) cannot be read back: truncated or garbled."""

    exit_status = 1

    def __init__(self, path: object, reason: str) -> None:
        super().__init__(f"{path} is damaged: {reason}")
        self.path = str(path)
        self.reason = reason


class IndexDamaged(IndexStateError):
    """Files of a generation differ from their recorded sizes or checksums (publish refuses it).

    ``damage``: what was found, file by file (``retrieval.index.checksums.Damage``)."""

    def __init__(self, message: str, damage: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.damage = damage


class DirectoryBusy(TrawlError):
    """Another process (or thread) is writing the directory: one writer at a time (``core.dirlock``)."""


class ExperimentsDisabled(TrawlError):
    """Experiment logging is not enabled on this server."""


class PushRejected(TrawlError):
    """A site's change notification (IndexNow) was refused."""


class PushKeyRejected(PushRejected):
    """The site's key file is missing, unreachable, or does not contain the key."""


class PushUrlsRejected(PushRejected):
    """Notified URLs (or the key location) do not belong to the notifying host."""


class PushHostNotCrawled(PushRejected):
    """The notifying host is outside the crawl: Trawl takes notifications only for sites it crawls."""


class PushThrottled(PushRejected):
    """The host sent more notifications than it may in a minute."""


class ModelError(TrawlError):
    """A model could not be used."""


class ModelLoadError(ModelError):
    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"Cannot load model from {path!r}: {reason}")
        self.path = path
        self.reason = reason


class StorageError(TrawlError):
    """Storage Trawl writes to failed in a way only the operator can fix: space, a database gone.

    Commands say it in one line and exit 1 (``DiskFull``, ``DatabaseUnavailable``); a route
    that meets it (a seed or an IndexNow push written to a full disk) answers 503: the
    request was fine, the service cannot take it until the operator acts."""

    exit_status = 1


class DiskFull(StorageError):
    """A write failed for lack of space; the message names where and what is left."""

    def __init__(
        self,
        path: str,
        free_bytes: int | None,
        *,
        advice: str = "free space and run the same command to resume",
    ) -> None:
        free = ""
        if free_bytes is not None:
            mb = free_bytes / 2**20
            free = f" ({mb:.1f} MB free)" if mb < 10 else f" ({mb:.0f} MB free)"
        super().__init__(f"disk full: {path}{free}; {advice}")
        self.path = path
        self.free_bytes = free_bytes


class DatabaseUnavailable(StorageError):
    """The crawl's PostgreSQL stayed unreachable for longer than ``crawl.db_outage_s``."""
