"""The records the crawl database holds and the frontiers pass around, whichever backend stores them.

URL statuses, kinds and outcomes (the texts the ``urls`` columns hold), a URL entering the
frontier (``NewUrl``), the result of handling one (``UrlUpdate``), a host's politeness state
(``HostState``) and health (``HostHealth``), and the conversions both backends apply when
they write them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

__all__ = [
    "HostHealth",
    "HostState",
    "NewUrl",
    "Outcome",
    "UrlKind",
    "UrlStatus",
    "UrlUpdate",
    "fetch_log_rows",
    "outcome_text",
    "record_params",
    "to_signed64",
    "to_unsigned64",
]


class UrlStatus(StrEnum):
    """Where a URL is in its life; the values are what the ``urls.status`` column holds."""

    PENDING = "pending"
    LEASED = "leased"
    DONE = "done"
    FAILED = "failed"
    BLOCKED = "blocked"


class UrlKind(StrEnum):
    """What a URL is fetched as (``urls.kind``)."""

    PAGE = "page"
    SITEMAP = "sitemap"


class Outcome(StrEnum):
    """What handling a URL found.

    The ``urls.outcome`` column stores one text per outcome, and for four kinds it
    carries a qualifier: the blocking rule (``blocked: robots.txt``), the fetch error
    (``error: timeout``), the exception class (``internal error: KeyError``), the
    duplicate kind (``duplicate (near)``); ``http`` adds the HTTP status (``http 404``).
    The qualifier travels beside the kind (``UrlUpdate.detail``) and is joined only
    when written (:func:`outcome_text`), so code compares kinds, never parses text,
    and databases written before the kinds were typed read the same.
    """

    NONE = ""
    INDEXED = "indexed"
    DUPLICATE = "duplicate"
    CANONICALIZED = "canonicalized"
    NOINDEX = "noindex"
    NOT_HTML = "not html"
    NOT_MODIFIED = "not modified"
    TOO_LARGE = "too large"
    REDIRECT = "redirect"
    FETCHED_VIA_REDIRECT = "fetched via redirect"
    SITEMAP = "sitemap"
    HTTP = "http"
    ERROR = "error"
    BLOCKED = "blocked"
    ROBOTS_UNAVAILABLE = "robots.txt unavailable"
    LEASE_EXPIRED = "lease expired"
    """The lease ran out, or a crawl process died holding it: counted as an attempt."""
    INTERNAL_ERROR = "internal error"
    PARSE_TIMEOUT = "parse timeout"
    """The page took longer than the parse budget; not retried."""


_OUTCOME_FORMATS = {
    Outcome.DUPLICATE: "{kind} ({detail})",
    Outcome.HTTP: "{kind} {detail}",
    Outcome.ERROR: "{kind}: {detail}",
    Outcome.BLOCKED: "{kind}: {detail}",
    Outcome.INTERNAL_ERROR: "{kind}: {detail}",
}


def outcome_text(outcome: Outcome, detail: object = "") -> str:
    """The ``urls.outcome`` text of a kind and its qualifier (the kind alone without one)."""
    if detail == "" or detail is None or outcome not in _OUTCOME_FORMATS:
        return str(outcome)
    return _OUTCOME_FORMATS[outcome].format(kind=outcome.value, detail=detail)


_MASK64 = (1 << 64) - 1


def to_signed64(value: int) -> int:
    """SQLite integers are signed: store a 64-bit fingerprint in two's complement."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def to_unsigned64(value: int) -> int:
    return value & _MASK64


@dataclass(frozen=True, slots=True)
class NewUrl:
    """A URL entering the frontier."""

    url: str
    host: str
    depth: int
    priority: float
    kind: UrlKind = UrlKind.PAGE
    parent: str = ""
    redirects: int = 0
    status: UrlStatus = UrlStatus.PENDING
    blocked_reason: str = ""
    outcome: Outcome = Outcome.NONE
    dup_of: str = ""
    lastmod: float | None = None
    """The sitemap's ``<lastmod>`` of a URL found in one (Unix seconds)."""


@dataclass(frozen=True, slots=True)
class UrlUpdate:
    """The result of handling one leased URL."""

    url: str
    status: UrlStatus
    """``done``, ``failed``, ``blocked`` or ``pending`` (a retry)."""
    outcome: Outcome
    http_status: int | None = None
    content_hash: str = ""
    simhash: int = 0
    etag: str = ""
    last_modified: str = ""
    last_fetch: float | None = None
    next_fetch: float | None = None
    interval_s: float = 0.0
    retries: int = 0
    blocked_reason: str = ""
    dup_of: str = ""
    fetched: bool = False
    changed: bool = False
    bytes: int = 0
    elapsed_s: float = 0.0
    detail: str = ""
    """The outcome's qualifier: blocking rule, fetch error, exception class, duplicate kind."""

    @property
    def outcome_text(self) -> str:
        """The stored outcome (``http`` is qualified by the HTTP status)."""
        detail = self.http_status if self.outcome is Outcome.HTTP else self.detail
        return outcome_text(self.outcome, detail)

    def attempt_time(self, now: float) -> float | None:
        """The ``last_fetch`` to store: a failure always records when it was tried (the
        recrawl tries a failed page again ``failed_retry_s`` after its last attempt)."""
        if self.last_fetch is None and self.status == UrlStatus.FAILED:
            return now
        return self.last_fetch

    @property
    def outcome_key(self) -> str:
        """The outcome as crawl statistics count it: the kind, and the status or duplicate kind."""
        if self.outcome in (Outcome.HTTP, Outcome.DUPLICATE):
            return self.outcome_text
        return str(self.outcome)


@dataclass(frozen=True, slots=True)
class HostState:
    """A host's politeness state as the frontier persists it."""

    host: str
    next_allowed: float
    backoff_s: float
    errors: int


@dataclass(frozen=True, slots=True)
class HostHealth:
    """One host's URL counts, politeness state and response times (``crawl.state.host_health``)."""

    host: str
    done: int
    pending: int
    """Pending and leased: the host's backlog."""
    failed: int
    blocked: int
    http_4xx: int
    http_5xx: int
    errors: int
    backoff_s: float
    next_allowed_in_s: float
    mean_response_ms: float
    fetches: int
    indexed: int = 0
    """Of ``done``: pages stored for the index (the rest are duplicates, redirects, robots.txt
    files, and pages not indexed: noindex, not HTML)."""


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def fetch_log_rows(updates: Sequence[UrlUpdate], now: float) -> list[dict[str, object]]:
    """The fetch-log rows of a batch's results, for both frontier backends: one per fetch,
    failure or retry (a deferral that fetched nothing is not a fetch)."""
    return [
        {
            "url": u.url,
            "at": u.last_fetch or now,
            "http_status": u.http_status,
            "outcome": u.outcome_text,
            "bytes": u.bytes,
            "elapsed_s": u.elapsed_s,
        }
        for u in updates
        if u.fetched or u.status == UrlStatus.FAILED or u.retries
    ]


def record_params(record: Any, **overrides: object) -> dict[str, object]:
    """A dataclass record's fields as named SQL parameters, some values replaced."""
    names = _FIELD_NAMES.get(type(record))
    if names is None:
        names = _FIELD_NAMES[type(record)] = tuple(f.name for f in fields(record))
    params: dict[str, object] = {name: getattr(record, name) for name in names}
    params.update(overrides)
    return params
