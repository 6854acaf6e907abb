"""The crawl database in PostgreSQL: one frontier shared by every crawl worker of a fleet.

The same tables as the SQLite database (``crawl.state.sqlite``) plus what coordination needs:

* ``urls.url`` is the primary key, so an ``INSERT … ON CONFLICT DO NOTHING`` is the seen
  check of record (each worker's Bloom filter only saves the round trip for repeats).
* ``hosts`` rows are *leased*: a worker takes the host whose time has come with
  ``FOR UPDATE SKIP LOCKED`` and marks it ``lease_owner``/``lease_until``, fetches its
  leased URLs one at a time, and releases it with the next allowed time (min delay,
  Crawl-delay, backoff).
  So one request per host is in flight across the fleet and politeness is decided in
  one place. A worker that dies leaves leases that expire: the host frees itself and
  its leased URLs return to pending with one more attempt counted.
* ``robots`` is shared, so a host's robots.txt is fetched once per fleet.
* ``workers`` holds a heartbeat per worker for ``trawl crawl status``.

Two connections: one for the frontier (its rounds of leases and releases, on the pump's
thread, and robots and reads) and one for the batch writer thread (``apply``), each
behind its own lock, so a commit never interleaves with a lease in one transaction.
Batches and rounds are set-based: one statement per kind of row, not one per row.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from crawl.extraction.dedup import ContentClaim, DupVerdict, simhash_blocks
from crawl.frontier.tiers import DueCandidate, Importance, choose_due
from crawl.state.sqlite import (
    RECRAWL_OVERDUE,
    STALE_CLUSTERS,
    HostHealth,
    HostState,
    NewUrl,
    UrlKind,
    UrlStatus,
    UrlUpdate,
    _params,
    fetch_log_rows,
    to_signed64,
    to_unsigned64,
)

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger(__name__)

__all__ = ["PgCrawlDb", "is_postgres_url"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS urls (
    id BIGSERIAL,
    url TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'page',
    depth INTEGER NOT NULL,
    priority DOUBLE PRECISION NOT NULL,
    status TEXT NOT NULL,
    outcome TEXT NOT NULL DEFAULT '',
    discovered_at DOUBLE PRECISION NOT NULL,
    parent TEXT NOT NULL DEFAULT '',
    http_status INTEGER,
    content_hash TEXT NOT NULL DEFAULT '',
    simhash BIGINT NOT NULL DEFAULT 0,
    etag TEXT NOT NULL DEFAULT '',
    last_modified TEXT NOT NULL DEFAULT '',
    last_fetch DOUBLE PRECISION,
    next_fetch DOUBLE PRECISION,
    interval_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    retries INTEGER NOT NULL DEFAULT 0,
    redirects INTEGER NOT NULL DEFAULT 0,
    fetch_count INTEGER NOT NULL DEFAULT 0,
    change_count INTEGER NOT NULL DEFAULT 0,
    blocked_reason TEXT NOT NULL DEFAULT '',
    dup_of TEXT NOT NULL DEFAULT '',
    lease_until DOUBLE PRECISION,
    lease_owner TEXT NOT NULL DEFAULT '',
    lastmod DOUBLE PRECISION,
    cluster_written INTEGER
);
ALTER TABLE urls ADD COLUMN IF NOT EXISTS lastmod DOUBLE PRECISION;
ALTER TABLE urls ADD COLUMN IF NOT EXISTS cluster_written INTEGER;
CREATE INDEX IF NOT EXISTS urls_pending ON urls(host, priority DESC, id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS urls_status ON urls(status);
CREATE INDEX IF NOT EXISTS urls_dup_of ON urls(dup_of) WHERE dup_of != '';
CREATE TABLE IF NOT EXISTS hosts (
    seq BIGSERIAL,
    host TEXT PRIMARY KEY,
    next_allowed DOUBLE PRECISION NOT NULL DEFAULT 0,
    backoff_s DOUBLE PRECISION NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT NOT NULL DEFAULT '',
    lease_until DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS fetch_log (
    url TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    http_status INTEGER,
    outcome TEXT NOT NULL,
    bytes BIGINT NOT NULL,
    elapsed_s DOUBLE PRECISION NOT NULL
);
CREATE INDEX IF NOT EXISTS fetch_log_url ON fetch_log(url);
CREATE INDEX IF NOT EXISTS fetch_log_at ON fetch_log(at);
CREATE TABLE IF NOT EXISTS robots (
    origin TEXT PRIMARY KEY,
    status INTEGER NOT NULL,
    body TEXT NOT NULL,
    fetched_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS workers (
    worker TEXT PRIMARY KEY,
    started_at DOUBLE PRECISION NOT NULL,
    heartbeat_at DOUBLE PRECISION NOT NULL,
    counters JSONB NOT NULL DEFAULT '{}'
);
ALTER TABLE urls ADD COLUMN IF NOT EXISTS reserved BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE hosts ADD COLUMN IF NOT EXISTS admitted INTEGER;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS short_at DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN IF NOT EXISTS hosts_held INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS host_admissions (
    host TEXT PRIMARY KEY,
    admitted INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS contents (
    content_hash TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    simhash BIGINT NOT NULL,
    seq BIGSERIAL,
    b0 INTEGER GENERATED ALWAYS AS ((simhash & 65535)::int) STORED,
    b1 INTEGER GENERATED ALWAYS AS (((simhash >> 16) & 65535)::int) STORED,
    b2 INTEGER GENERATED ALWAYS AS (((simhash >> 32) & 65535)::int) STORED,
    b3 INTEGER GENERATED ALWAYS AS (((simhash >> 48) & 65535)::int) STORED
);
CREATE INDEX IF NOT EXISTS contents_b0 ON contents(b0);
CREATE INDEX IF NOT EXISTS contents_b1 ON contents(b1);
CREATE INDEX IF NOT EXISTS contents_b2 ON contents(b2);
CREATE INDEX IF NOT EXISTS contents_b3 ON contents(b3);
INSERT INTO contents(content_hash, url, simhash)
SELECT DISTINCT ON (content_hash) content_hash, url, simhash FROM urls
WHERE outcome = 'indexed' AND content_hash <> '' AND NOT EXISTS (SELECT 1 FROM contents)
ORDER BY content_hash, id
ON CONFLICT (content_hash) DO NOTHING;
CREATE TABLE IF NOT EXISTS page_budget (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    spent BIGINT NOT NULL
);
INSERT INTO page_budget(id, spent)
SELECT 1, (SELECT COUNT(*) FROM urls WHERE kind = 'page'
           AND (status = 'leased' OR (status IN ('done', 'failed') AND fetch_count > 0)))
WHERE NOT EXISTS (SELECT 1 FROM page_budget);
CREATE OR REPLACE FUNCTION trawl_refund_page() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT (NEW.status IN ('done', 'failed') AND NEW.fetch_count > OLD.fetch_count) THEN
        UPDATE page_budget SET spent = spent - 1 WHERE id = 1;
    END IF;
    NEW.reserved := FALSE;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER urls_refund_page BEFORE UPDATE ON urls FOR EACH ROW
    WHEN (OLD.reserved AND NEW.status <> 'leased') EXECUTE FUNCTION trawl_refund_page();
CREATE TABLE IF NOT EXISTS trawl_schema (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    digest TEXT NOT NULL
);
"""
"""The fleet's page budget (``--max-pages`` across workers, DECISIONS 41): ``page_budget.spent``
counts pages fetched (done or failed with a fetch) and pages leased with a share of it
(``urls.reserved``). The trigger settles a share when its URL leaves the lease, on every
path (result, retry, robots deferral, expiry, a dead worker's release): a fetch keeps it,
anything else gives it back. The per-host cap counts in ``host_admissions`` (a host
without a row: not counted yet, read from ``hosts.admitted``, which databases from before
that table kept, or from ``urls`` once)."""
_SCHEMA_LOCK = 7_316_016  # pg_advisory_xact_lock key: workers starting together create the schema once
_SCHEMA_DIGEST = hashlib.sha256(_SCHEMA.encode()).hexdigest()
"""Which schema a database was last brought to: ``trawl_schema.digest``. A worker whose
``_SCHEMA`` matches skips the DDL; running it again is not free even when every statement
says ``IF NOT EXISTS``: ``ALTER TABLE ... ADD COLUMN IF NOT EXISTS`` and ``CREATE OR REPLACE
TRIGGER`` take an ACCESS EXCLUSIVE lock on ``urls``, and a worker joining a crawl already
running queued behind the others' reads and deadlocked with their writes (a fleet test
died on ``DeadlockDetected`` here)."""
_CONTENT_LOCK = 7_316_100
"""First of four ``pg_advisory_xact_lock(class, value)`` classes, one per 16-bit SimHash block
(the two-key space does not overlap the one-key space of ``_SCHEMA_LOCK``)."""
_CLAIM_LOCKS = (
    "SELECT COUNT(pg_advisory_xact_lock(k.class, k.value)) AS n "
    "FROM unnest(%(classes)s::int[], %(values)s::int[]) AS k(class, value)"
)
"""Locks taken in the order given (sorted by the caller): two claims never wait on each other in a cycle."""
_CLAIM_FIND = (
    "SELECT v.url, m.owner, m.exact, m.distance "
    "FROM unnest(%(urls)s::text[], %(hashes)s::text[], %(simhashes)s::bigint[]) "
    "AS v(url, content_hash, simhash) "
    "CROSS JOIN LATERAL (SELECT c.url AS owner, c.content_hash = v.content_hash AS exact, "
    "bit_count((c.simhash # v.simhash)::bit(64)) AS distance FROM contents c "
    "WHERE c.url <> v.url AND (c.content_hash = v.content_hash OR ("
    "(c.b0 = (v.simhash & 65535)::int OR c.b1 = ((v.simhash >> 16) & 65535)::int "
    "OR c.b2 = ((v.simhash >> 32) & 65535)::int OR c.b3 = ((v.simhash >> 48) & 65535)::int) "
    "AND bit_count((c.simhash # v.simhash)::bit(64)) <= %(max_distance)s)) "
    "ORDER BY exact DESC, distance, c.seq LIMIT 1) AS m"
)
"""For each new document, the original it copies: another URL's document with the same content
hash, else the closest SimHash within ``max_distance`` bits among those sharing a 16-bit
block (the pigeonhole lookup of ``crawl.extraction.dedup.NearDupIndex``), the earliest on a tie."""
_CLAIM_INSERT = (
    "INSERT INTO contents(content_hash, url, simhash) "
    "SELECT * FROM unnest(%(hashes)s::text[], %(urls)s::text[], %(simhashes)s::bigint[]) "
    "ON CONFLICT (content_hash) DO NOTHING"
)


def _claim_arrays(claims: Sequence[ContentClaim]) -> dict[str, list[Any]]:
    """The claims as the column arrays ``_CLAIM_FIND`` and ``_CLAIM_INSERT`` unnest."""
    return {
        "urls": [c.url for c in claims],
        "hashes": [c.content_hash for c in claims],
        "simhashes": [to_signed64(c.simhash) for c in claims],
    }


_DUE = (
    "kind = 'page' AND status = 'done' AND next_fetch IS NOT NULL AND fetch_count > 0 "
    "AND (next_fetch <= %s OR lastmod > last_fetch)"
)
"""Fetched pages whose next fetch has come, or whose sitemap says they changed since."""
_FAILED_DUE = (
    "UPDATE urls SET status = 'pending', retries = 0 WHERE kind = 'page' AND status = 'failed' "
    "AND COALESCE(last_fetch, 0) <= %s"
)
"""As on SQLite: failed pages whose last attempt is old enough are tried again."""
_SITEMAPS_DUE = (
    "UPDATE urls SET status = 'pending', retries = 0 WHERE kind = 'sitemap' AND status = 'done' "
    "AND fetch_count > 0 AND (next_fetch <= %s OR (next_fetch IS NULL AND outcome = 'sitemap'))"
)
"""As on SQLite: fetched sitemaps whose refetch has come."""
_SET_LASTMOD = "UPDATE urls SET lastmod = %s WHERE url = %s AND (lastmod IS NULL OR lastmod < %s)"
_INSERT_URLS = (
    "INSERT INTO urls(url, host, kind, depth, priority, status, outcome, "
    "discovered_at, parent, redirects, blocked_reason, dup_of, lastmod) "
    "SELECT v.url, v.host, v.kind, v.depth, v.priority, v.status, v.outcome, %(now)s, v.parent, "
    "v.redirects, v.blocked_reason, v.dup_of, v.lastmod FROM jsonb_to_recordset(%(rows)s::jsonb) "
    "AS v(url text, host text, kind text, depth int, priority float8, status text, outcome text, "
    "parent text, redirects int, blocked_reason text, dup_of text, lastmod float8) ORDER BY v.url "
    "ON CONFLICT (url) DO NOTHING"
)
"""One statement per batch of new URLs (a row each in ``rows``, a JSON array): set-based, so a
thousand URLs cost the server one statement, not a thousand. Ordered by URL, so two workers
inserting overlapping batches take row locks in one order."""
_INSERT_HOSTS = (
    "INSERT INTO hosts(host) SELECT h FROM unnest(%(hosts)s::text[]) AS h "
    "WHERE NOT EXISTS (SELECT 1 FROM hosts k WHERE k.host = h) ORDER BY h "
    "ON CONFLICT (host) DO NOTHING"
)
"""New hosts only: ``ON CONFLICT`` on a host row that another worker's round is updating
(its lease, its release) waits for that round to commit, and nearly every batch of new URLs
names hosts that exist; a row this snapshot already sees is left alone without waiting."""
_LEASE_URL_ROW = (
    "UPDATE urls SET status = 'leased', lease_until = %(until)s WHERE url = %(url)s AND status = 'pending'"
)
_UPDATE_URLS = (
    "UPDATE urls SET status = v.status, outcome = v.outcome, "
    "http_status = COALESCE(v.http_status, urls.http_status), "
    "content_hash = CASE WHEN v.content_hash != '' THEN v.content_hash ELSE urls.content_hash END, "
    "simhash = CASE WHEN v.content_hash != '' THEN v.simhash ELSE urls.simhash END, "
    "etag = CASE WHEN v.fetched THEN v.etag ELSE urls.etag END, "
    "last_modified = CASE WHEN v.fetched THEN v.last_modified ELSE urls.last_modified END, "
    "last_fetch = COALESCE(v.last_fetch, urls.last_fetch), next_fetch = v.next_fetch, "
    "interval_s = CASE WHEN v.interval_s > 0 THEN v.interval_s ELSE urls.interval_s END, "
    "retries = v.retries, blocked_reason = v.blocked_reason, dup_of = v.dup_of, "
    "fetch_count = urls.fetch_count + v.fetched::int, change_count = urls.change_count + v.changed::int, "
    "lease_until = NULL, lease_owner = '' "
    "FROM jsonb_to_recordset(%(rows)s::jsonb) AS v(url text, status text, outcome text, http_status int, "
    "content_hash text, simhash bigint, etag text, last_modified text, last_fetch float8, next_fetch float8, "
    "interval_s float8, retries int, blocked_reason text, dup_of text, fetched boolean, changed boolean) "
    "WHERE urls.url = v.url "
    # A retry already went back to pending at ``finish`` (the round's requeue); by the time its
    # batch is stored another worker may hold the URL or have finished it, and a stale
    # ``pending`` row would reopen a page the fleet has done: it applies only while pending.
    "AND (v.status != 'pending' OR urls.status = 'pending')"
)
"""A batch's results in one statement; each URL at most once per statement (``_update_rows``)."""
_LOG_FETCHES = (
    "INSERT INTO fetch_log(url, at, http_status, outcome, bytes, elapsed_s) "
    "SELECT v.url, v.at, v.http_status, v.outcome, v.bytes, v.elapsed_s "
    "FROM jsonb_to_recordset(%(rows)s::jsonb) "
    "AS v(url text, at float8, http_status int, outcome text, bytes bigint, elapsed_s float8)"
)
_SAVE_HOST = (
    "INSERT INTO hosts(host, next_allowed, backoff_s, errors) "
    "VALUES (%(host)s, %(next_allowed)s, %(backoff_s)s, %(errors)s) "
    "ON CONFLICT (host) DO UPDATE SET next_allowed = GREATEST(hosts.next_allowed, excluded.next_allowed), "
    "backoff_s = excluded.backoff_s, errors = excluded.errors"
)
_SHORT_FRESH_S = 1.0
"""How long a worker's lease that got fewer hosts than it asked for restrains the others.
A short worker leases again within ``wait_hint``'s 0.25 s, so a fresh mark means it is
still short; one that stopped asking (satisfied, stopping, dead) no longer counts."""
_LEASE = """
WITH h AS (
    SELECT h.host, h.backoff_s, h.errors, h.next_allowed, h.seq FROM hosts h
    WHERE h.next_allowed <= %(now)s AND h.lease_until < %(now)s
      AND h.host <> ALL(%(skip)s::text[])
      AND (SELECT 1 FROM urls p WHERE p.host = h.host AND p.status = 'pending' LIMIT 1) IS NOT NULL
    ORDER BY h.next_allowed, h.seq
    LIMIT GREATEST(0, LEAST(%(n)s, COALESCE(
        (SELECT MIN(w.hosts_held) + 1 - %(held)s FROM workers w
         WHERE w.worker <> %(owner)s AND w.short_at >= %(short_since)s),
        %(n)s)))
    FOR UPDATE SKIP LOCKED
), u AS (
    SELECT h.host, best.url FROM h CROSS JOIN LATERAL (
        SELECT urls.url FROM urls
        WHERE urls.host = h.host AND urls.status = 'pending'
        ORDER BY urls.priority DESC, urls.id LIMIT %(per_host)s
        FOR UPDATE SKIP LOCKED
    ) best
), leased_host AS (
    UPDATE hosts SET lease_owner = %(owner)s, lease_until = %(until)s
    FROM u WHERE hosts.host = u.host
    RETURNING hosts.host
), shares AS (
    UPDATE workers SET hosts_held = %(held)s + got.hosts,
        short_at = CASE WHEN got.hosts < %(n)s THEN %(now)s ELSE 0 END
    FROM (SELECT COUNT(*) AS hosts FROM leased_host) got
    WHERE worker = %(owner)s
)
UPDATE urls SET status = 'leased', lease_until = %(until)s, lease_owner = %(owner)s,
    reserved = (%(reserve)s AND urls.kind = 'page')
FROM u JOIN h ON h.host = u.host
WHERE urls.url = u.url
RETURNING urls.url, urls.host, urls.depth, urls.priority, urls.kind, urls.retries, urls.redirects,
    urls.etag, urls.last_modified, urls.content_hash, urls.interval_s, urls.fetch_count, urls.next_fetch,
    urls.lastmod, urls.last_fetch,
    urls.fetch_count > 0 AS has_history, h.backoff_s, h.errors, h.next_allowed AS host_ready_at,
    h.seq AS host_seq, urls.id AS url_seq
"""
"""Lease up to ``n`` ready hosts, each with its ``per_host`` best pending URLs, in one statement
(one round trip). While another worker is short of hosts (``short_at`` fresh), no more than
one host past its ``hosts_held``; the statement marks its own worker short, with the hosts
it then holds, when it gets fewer hosts than ``n`` (DECISIONS 51).

Host rows are locked ``FOR UPDATE SKIP LOCKED`` (racing workers never wait on each
other) and a host is leased only together with a URL: when its last pending URL was
just taken under another lease, that host is left alone. "Has a pending URL" is a
scalar subquery, one index probe per host, so the planner cannot turn it into a join
over the whole pending frontier (it did, on a table not analysed yet: a hash of every
pending URL per lease); the URL is the first entry of ``urls_pending`` for the host.

Never prepared: the generic plan PostgreSQL settles on after five runs cost ~5 ms a
lease against ~0.5 ms planned for the actual values (measured on the crawl bench)."""
_REQUEUE_MANY = (
    "UPDATE urls SET status = 'pending', lease_until = NULL, lease_owner = '', retries = v.retries, "
    "outcome = COALESCE(v.outcome, urls.outcome) "
    "FROM unnest(%(urls)s::text[], %(retries)s::int[], %(outcomes)s::text[]) AS v(url, retries, outcome) "
    "WHERE urls.url = v.url AND urls.status = 'leased' AND urls.lease_owner = %(owner)s"
)
_RELEASE_MANY = (
    "UPDATE hosts SET next_allowed = GREATEST(hosts.next_allowed, v.next_allowed), "
    "backoff_s = v.backoff_s, errors = v.errors, "
    "lease_until = CASE WHEN hosts.lease_owner = %(owner)s THEN 0 ELSE hosts.lease_until END, "
    "lease_owner = CASE WHEN hosts.lease_owner = %(owner)s THEN '' ELSE hosts.lease_owner END "
    "FROM unnest(%(hosts)s::text[], %(next_allowed)s::float8[], %(backoff_s)s::float8[], %(errors)s::int[]) "
    "AS v(host, next_allowed, backoff_s, errors) WHERE hosts.host = v.host"
)
_BUDGET_FOR_UPDATE = "SELECT spent FROM page_budget WHERE id = 1 FOR UPDATE"
_BUDGET_SPEND = "UPDATE page_budget SET spent = spent + %s WHERE id = 1"
_START_ADMISSIONS = (
    "INSERT INTO host_admissions(host, admitted) "
    "SELECT h, COALESCE((SELECT k.admitted FROM hosts k WHERE k.host = h), "
    "(SELECT COUNT(*) FROM urls u WHERE u.host = h AND u.kind = 'page' AND u.status != 'blocked')) "
    "FROM unnest(%(hosts)s::text[]) AS h "
    "WHERE NOT EXISTS (SELECT 1 FROM host_admissions a WHERE a.host = h) ORDER BY h "
    "ON CONFLICT (host) DO NOTHING"
)
"""A counter for each host that has none yet: the count a database from before
``host_admissions`` kept in ``hosts.admitted``, or the host's pages counted once."""
_LOCK_ADMITTED = (
    "SELECT host, admitted FROM host_admissions WHERE host = ANY(%(hosts)s) ORDER BY host FOR UPDATE"
)
"""Each host's admitted pages, its counter locked (hosts in one order across workers) until
the insert's transaction ends: two workers admitting pages of one host count one after the
other. The counters live apart from ``hosts`` so that counting never locks a host row: a
lease skips locked host rows (``SKIP LOCKED``) and a release waits for them, and with the
counts on ``hosts`` every batch of new URLs locked most of the crawl's hosts for its
transaction. Two bench workers then took turns at leasing nothing: on 2026-12-05 three of
six two-worker bench crawls ran 8.4-10.6 s against 6.5-7.1 s for six with the cap switched
off; with the counters apart, interleaved runs measure as with no cap (8.4 and 7.0 s
against 8.5 and 6.9), and the waits of ``INSERT INTO hosts`` on leased rows (0.24 s a
crawl) are gone."""
_SET_ADMITTED = (
    "UPDATE host_admissions SET admitted = v.n FROM unnest(%(hosts)s::text[], %(counts)s::int[]) "
    "AS v(host, n) WHERE host_admissions.host = v.host"
)
_OVER_HOST_BUDGET = (
    "UPDATE urls SET status = 'blocked', outcome = 'blocked', blocked_reason = 'host page budget reached' "
    "WHERE url = ANY(%(urls)s) AND status = 'pending'"
)
_SET_CLUSTER_SIZES = (
    "UPDATE urls SET cluster_written = v.size "
    "FROM unnest(%(urls)s::text[], %(sizes)s::int[]) AS v(url, size) WHERE urls.url = v.url"
)
_IDLE = (
    "SELECT EXISTS (SELECT 1 FROM urls WHERE status = 'pending') AS pending, "
    "EXISTS (SELECT 1 FROM urls WHERE status = 'leased' AND lease_owner != %(owner)s) AS others, "
    "(SELECT MIN(GREATEST(h.next_allowed, h.lease_until)) FROM hosts h WHERE "
    "(SELECT 1 FROM urls p WHERE p.host = h.host AND p.status = 'pending' LIMIT 1) IS NOT NULL) AS ready_at"
)


def is_postgres_url(url: str | None) -> bool:
    """True for a ``postgresql://`` (or ``postgres://``) frontier URL."""
    return bool(url) and str(url).startswith(("postgresql://", "postgres://"))


def _connect(dsn: str) -> psycopg.Connection[dict[str, Any]]:
    """Imported here, not at module level: a SQLite crawl never loads the driver (~23 MB)."""
    import psycopg
    from psycopg.rows import dict_row

    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row)


P = ParamSpec("P")
R = TypeVar("R")
_RETRIES = 5


def _retry_on_conflict(method: Callable[P, R]) -> Callable[P, R]:
    """Run a write again when PostgreSQL aborted it as a deadlock or serialization victim.

    Workers write overlapping rows (a URL one worker leases, another discovers again;
    its lease renewal beside their batch), and PostgreSQL breaks a lock cycle by failing
    one transaction: it was rolled back whole, and every write here is idempotent, so
    running it again is the documented remedy.
    """

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        from psycopg import errors

        for attempt in range(_RETRIES):
            try:
                return method(*args, **kwargs)
            except (errors.DeadlockDetected, errors.SerializationFailure) as exc:
                if attempt == _RETRIES - 1:
                    raise
                logger.info("retrying %s after %s", method.__name__, type(exc).__name__)
                time.sleep(0.01 * 2**attempt)
        raise AssertionError("unreachable")

    return wrapper


class PgCrawlDb:
    """One crawl's PostgreSQL database; the methods of ``crawl.state.sqlite.CrawlDb`` plus leasing."""

    def __init__(self, dsn: str, *, readonly: bool = False) -> None:
        self.dsn = dsn
        self._conn = _connect(dsn)
        self._lock = threading.RLock()
        self._wconn: psycopg.Connection[dict[str, Any]] | None = None
        self._wlock = threading.Lock()
        self.admission_cap: int | None = None
        """The fleet's per-host page cap (``max_pages_per_host``), set by the frontier leasing
        from this database: new pending pages of a host past it are stored blocked."""
        self.pages_left: int | None = None
        """Pages left of the fleet's budget after the last lease that asked with one."""
        if not readonly:
            self._ensure_schema()

    @_retry_on_conflict
    def _ensure_schema(self) -> None:
        """Create or upgrade the schema once per version, under the fleet's schema lock."""
        with self._lock, self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            if self._schema_digest() == _SCHEMA_DIGEST:
                return
            self._conn.execute(_SCHEMA)
            self._conn.execute(
                "INSERT INTO trawl_schema(id, digest) VALUES (1, %s) "
                "ON CONFLICT (id) DO UPDATE SET digest = EXCLUDED.digest",
                (_SCHEMA_DIGEST,),
            )

    def _schema_digest(self) -> str | None:
        """The digest recorded by the last worker that ran the DDL (None: never, or older code)."""
        found = self._conn.execute("SELECT to_regclass('trawl_schema') IS NOT NULL AS t").fetchone()
        if not (found and found["t"]):
            return None
        row = self._conn.execute("SELECT digest FROM trawl_schema WHERE id = 1").fetchone()
        return None if row is None else str(row["digest"])

    def _writer(self) -> psycopg.Connection[dict[str, Any]]:
        if self._wconn is None:
            self._wconn = _connect(self.dsn)
        return self._wconn

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        with self._wlock:
            if self._wconn is not None:
                self._wconn.close()

    def _one(self, sql: str, params: Any = None) -> dict[str, Any] | None:
        with self._lock:
            row: dict[str, Any] | None = self._conn.execute(sql, params).fetchone()
        return row

    def _all(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def _scalar(self, sql: str, params: Any = None) -> Any:
        row = self._one(sql, params)
        return next(iter(row.values())) if row else None

    # -- reads ---------------------------------------------------------------

    def exists(self, url: str) -> bool:
        return self._one("SELECT 1 AS x FROM urls WHERE url = %s", (url,)) is not None

    def knows_host(self, host: str) -> bool:
        """As ``CrawlDb.knows_host``: every host with URLs has a ``hosts`` row here (``_insert``)."""
        return self._one("SELECT 1 AS x FROM hosts WHERE host = %s", (host,)) is not None

    def iter_urls(self) -> Iterator[str]:
        import psycopg

        with psycopg.connect(self.dsn) as conn, conn.cursor(name="iter_urls") as cursor:
            cursor.execute("SELECT url FROM urls")
            for (url,) in cursor:
                yield url

    def count_urls(self) -> int:
        return int(self._scalar("SELECT COUNT(*) FROM urls"))

    def fetch_state(self, url: str) -> dict[str, Any] | None:
        return self._one(
            "SELECT etag, last_modified, content_hash, interval_s, fetch_count FROM urls WHERE url = %s",
            (url,),
        )

    def admitted_pages_by_host(self) -> dict[str, int]:
        rows = self._all(
            "SELECT host, COUNT(*) AS n FROM urls WHERE kind = 'page' AND status != 'blocked' GROUP BY host"
        )
        return {r["host"]: int(r["n"]) for r in rows}

    def host_health(self, now: float) -> list[HostHealth]:
        """Every host with URLs: counts by status and HTTP class, politeness as of ``now``, timing."""
        rows = self._all(
            """
            SELECT u.host,
                   COUNT(*) FILTER (WHERE status = 'done') AS done,
                   COUNT(*) FILTER (WHERE status IN ('pending', 'leased')) AS pending,
                   COUNT(*) FILTER (WHERE status = 'failed') AS failed,
                   COUNT(*) FILTER (WHERE status = 'blocked') AS blocked,
                   COUNT(*) FILTER (WHERE http_status BETWEEN 400 AND 499) AS c4,
                   COUNT(*) FILTER (WHERE http_status BETWEEN 500 AND 599) AS c5,
                   MAX(h.next_allowed) AS next_allowed, MAX(h.backoff_s) AS backoff, MAX(h.errors) AS errors
            FROM urls u LEFT JOIN hosts h ON h.host = u.host GROUP BY u.host ORDER BY u.host
            """
        )
        timing = {
            r["host"]: (float(r["mean_s"] or 0.0), int(r["n"]))
            for r in self._all(
                "SELECT u.host, AVG(f.elapsed_s) AS mean_s, COUNT(*) AS n "
                "FROM fetch_log f JOIN urls u ON u.url = f.url GROUP BY u.host"
            )
        }
        out = []
        for r in rows:
            mean_s, fetches = timing.get(r["host"], (0.0, 0))
            out.append(
                HostHealth(
                    host=r["host"],
                    done=int(r["done"]),
                    pending=int(r["pending"]),
                    failed=int(r["failed"]),
                    blocked=int(r["blocked"]),
                    http_4xx=int(r["c4"]),
                    http_5xx=int(r["c5"]),
                    errors=int(r["errors"] or 0),
                    backoff_s=round(float(r["backoff"] or 0.0), 3),
                    next_allowed_in_s=round(max(0.0, float(r["next_allowed"] or 0.0) - now), 3),
                    mean_response_ms=round(mean_s * 1000, 1),
                    fetches=fetches,
                )
            )
        return out

    def count_finished_pages(self) -> int:
        return int(
            self._scalar(
                "SELECT COUNT(*) FROM urls WHERE kind = 'page' AND status IN ('done', 'failed') "
                "AND fetch_count > 0"
            )
        )

    def host_states(self) -> dict[str, tuple[float, float, int]]:
        """As ``CrawlDb.host_states``: host → (next_allowed, backoff_s, errors)."""
        rows = self._all("SELECT host, next_allowed, backoff_s, errors FROM hosts")
        return {r["host"]: (float(r["next_allowed"]), float(r["backoff_s"]), int(r["errors"])) for r in rows}

    def indexed_fingerprints(self) -> Iterator[tuple[str, str, int]]:
        rows = self._all("SELECT url, content_hash, simhash FROM urls WHERE outcome = 'indexed' ORDER BY id")
        for r in rows:
            yield r["url"], r["content_hash"], to_unsigned64(r["simhash"])

    def row(self, url: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM urls WHERE url = %s", (url,))

    def history(self, url: str) -> list[dict[str, Any]]:
        return self._all(
            "SELECT at, http_status, outcome, bytes, elapsed_s FROM fetch_log WHERE url = %s ORDER BY at",
            (url,),
        )

    def duplicates_of(self, url: str) -> list[str]:
        return [r["url"] for r in self._all("SELECT url FROM urls WHERE dup_of = %s ORDER BY url", (url,))]

    def duplicate_counts(self) -> dict[str, int]:
        rows = self._all(
            "SELECT dup_of, COUNT(*) AS n FROM urls WHERE outcome LIKE 'duplicate%%' GROUP BY dup_of"
        )
        return {r["dup_of"]: int(r["n"]) for r in rows}

    def stale_clusters(self) -> dict[str, tuple[int, int | None]]:
        """As ``CrawlDb.stale_clusters``."""
        rows = self._all(STALE_CLUSTERS)  # no parameters: psycopg leaves "%" as it is
        return {r["url"]: (int(r["size"]), None if r["written"] is None else int(r["written"])) for r in rows}

    def recrawl_overdue(self, now: float) -> tuple[int, float | None]:
        """As ``CrawlDb.recrawl_overdue``: the fleet's pages due for a refetch, and the oldest's due time."""
        r = self._one(RECRAWL_OVERDUE.format(now="%(now)s"), {"now": now})
        if r is None:
            return 0, None
        return int(r["n"]), None if r["since"] is None else float(r["since"])

    def status_counts(self) -> dict[str, int]:
        rows = self._all("SELECT status, outcome, COUNT(*) AS n FROM urls GROUP BY status, outcome")
        return {f"{r['status']}:{r['outcome']}" if r["outcome"] else r["status"]: int(r["n"]) for r in rows}

    def load_robots(self, origin: str) -> tuple[int, str, float, float] | None:
        r = self._one("SELECT status, body, fetched_at, expires_at FROM robots WHERE origin = %s", (origin,))
        return (
            (int(r["status"]), str(r["body"]), float(r["fetched_at"]), float(r["expires_at"])) if r else None
        )

    def backlog(self, owner: str) -> tuple[int, int]:
        """(pending URLs, URLs leased by other workers): what the fleet still has to do."""
        r = self._one(
            "SELECT COUNT(*) FILTER (WHERE status = 'pending') AS pending, "
            "COUNT(*) FILTER (WHERE status = 'leased' AND lease_owner != %s) AS others "
            "FROM urls WHERE status IN ('pending', 'leased')",
            (owner,),
        )
        return (int(r["pending"]), int(r["others"])) if r else (0, 0)

    def workers(self, now: float, *, alive_s: float = 30.0) -> list[dict[str, Any]]:
        """Every worker that ever heartbeat: alive when its last heartbeat is within ``alive_s``."""
        rows = self._all("SELECT worker, started_at, heartbeat_at, counters FROM workers ORDER BY worker")
        return [
            {
                "worker": r["worker"],
                "alive": now - float(r["heartbeat_at"]) <= alive_s,
                "heartbeat_age_s": round(now - float(r["heartbeat_at"]), 1),
                **dict(r["counters"] or {}),
            }
            for r in rows
        ]

    def fetches_since(self, since: float) -> int:
        """Fetches the fleet logged after ``since`` (pages/s over a window)."""
        return int(self._scalar("SELECT COUNT(*) FROM fetch_log WHERE at > %s", (since,)))

    # -- leasing (the fleet's coordination) ------------------------------------

    @_retry_on_conflict
    def exchange(
        self,
        owner: str,
        *,
        requeues: Sequence[tuple[str, int, str | None]],
        releases: Sequence[HostState],
        n: int,
        now: float,
        until: float,
        inserts: Sequence[NewUrl] = (),
        per_host: int = 1,
        budget: int | None = None,
        skip_hosts: Sequence[str] = (),
        held: int = 0,
    ) -> list[dict[str, Any]]:
        """Insert new URLs, put URLs back to pending, release hosts, then lease up to ``n`` hosts
        with up to ``per_host`` URLs each: one pipelined round trip.

        ``skip_hosts`` are not leased (``owner`` is waiting to borrow them, ``borrow_host``).

        ``held``: the hosts ``owner`` holds after these releases. While another worker is short
        of hosts (its last lease got fewer than it asked for, within ``_SHORT_FRESH_S``),
        ``owner`` leases only up to one host more than that worker holds (``_LEASE``).

        With ``budget`` (the fleet's ``--max-pages``), the pages leased take shares of it
        under the budget row's lock, never more than are left; ``pages_left`` says how many
        are left after this lease.

        ``inserts`` go in one transaction (URLs the fleet knows are skipped). ``requeues``
        are ``(url, retries, outcome)``: URLs leased by ``owner`` back to pending at once
        (a retry, or robots.txt took the slot; outcome None keeps the stored one).
        ``releases`` end ``owner``'s host leases with when each may next be asked. The URLs
        are pending before their hosts are free. The leases come back best host first, each
        host's URLs together and best first.
        Every part is idempotent, so a deadlock victim runs whole again.
        """
        with self._lock, self._conn.pipeline():
            if inserts:
                with self._conn.transaction(), self._conn.cursor() as cur:
                    _insert(cur, inserts, now, self.admission_cap)
            if requeues:
                ordered = sorted(requeues)  # one lock order across workers
                self._conn.execute(
                    _REQUEUE_MANY,
                    {
                        "owner": owner,
                        "urls": [r[0] for r in ordered],
                        "retries": [r[1] for r in ordered],
                        "outcomes": [r[2] for r in ordered],
                    },
                )
            if releases:
                hosts = sorted(releases, key=lambda h: h.host)
                self._conn.execute(
                    _RELEASE_MANY,
                    {
                        "owner": owner,
                        "hosts": [h.host for h in hosts],
                        "next_allowed": [h.next_allowed for h in hosts],
                        "backoff_s": [h.backoff_s for h in hosts],
                        "errors": [h.errors for h in hosts],
                    },
                )
            if n <= 0:
                return []
            params = {
                "owner": owner,
                "now": now,
                "until": until,
                "n": n,
                "per_host": max(1, per_host),
                "skip": sorted(skip_hosts),
                "held": held,
                "short_since": now - _SHORT_FRESH_S,
            }
            if budget is None:
                rows = self._conn.execute(_LEASE, params | {"reserve": False}, prepare=False).fetchall()
            else:
                rows = self._lease_within(budget, params)
        rows.sort(key=lambda r: (r["host_ready_at"], r["host_seq"], -r["priority"], r["url_seq"]))
        return [_lease_row(r) for r in rows]

    def _lease_within(self, budget: int, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Lease at most the pages left of ``budget``, holding the budget row meanwhile: racing
        workers take their shares one after the other, so the fleet never leases past it."""
        with self._conn.transaction():
            spent = int(self._conn.execute(_BUDGET_FOR_UPDATE).fetchone()["spent"])  # type: ignore[index]
            left = max(0, budget - spent)
            n = min(int(params["n"]), left)
            if n == 0:
                self.pages_left = left
                return []
            per_host = max(1, min(int(params["per_host"]), left // n))
            rows = self._conn.execute(
                _LEASE, params | {"n": n, "per_host": per_host, "reserve": True}, prepare=False
            ).fetchall()
            pages = sum(1 for r in rows if r["kind"] == "page")
            if pages:
                self._conn.execute(_BUDGET_SPEND, (pages,))
        self.pages_left = left - pages
        return rows

    def idle(self, owner: str) -> tuple[bool, bool, float | None]:
        """(any URL pending, any leased by another worker, when the next host is ready) in one query.

        Asked when a round leased less than it asked for: whether the fleet still has work,
        and how long to wait. Existence, not counts: this runs every such round, and a count
        reads the whole backlog (``backlog`` counts, once a heartbeat).
        """
        with self._lock:
            r = self._conn.execute(_IDLE, {"owner": owner}, prepare=False).fetchone()
        if r is None:
            return False, False, None
        ready_at = float(r["ready_at"]) if r["ready_at"] is not None else None
        return bool(r["pending"]), bool(r["others"]), ready_at

    @_retry_on_conflict
    def renew_leases(
        self, owner: str, urls: Sequence[str], until: float, *, hosts: Sequence[str] = ()
    ) -> set[str]:
        """Extend ``owner``'s leases on ``urls`` and ``hosts`` to ``until``; returns the URLs renewed.

        A live worker's leases must not run out under it: URLs being fetched, queued with
        their kept host, or finished with their results waiting to be committed, and the
        hosts it still holds. A lease already reaped (the worker stalled past its expiry)
        belongs to the fleet again and is not renewed: the URLs returned say which were.
        """
        if not urls and not hosts:
            return set()
        with self._lock, self._conn.transaction():
            rows = self._conn.execute(
                "UPDATE urls SET lease_until = %s "
                "WHERE url = ANY(%s) AND lease_owner = %s AND status = 'leased' RETURNING url",
                (until, sorted(urls), owner),
            ).fetchall()
            if hosts:
                self._conn.execute(
                    "UPDATE hosts SET lease_until = %s WHERE host = ANY(%s) AND lease_owner = %s",
                    (until, sorted(hosts), owner),
                )
        return {r["url"] for r in rows}

    @_retry_on_conflict
    def borrow_host(self, owner: str, host: str, *, now: float, until: float) -> tuple[float, int] | None:
        """Lease ``host`` to ``owner`` without a URL if no one holds it and its time has come.

        Returns the host's ``(backoff_s, errors)`` when leased, None when it is busy. For a
        request that is none of the host's URLs (a robots.txt redirect from another host):
        the release goes through the normal round (``exchange``), with the next allowed time.
        The row is created for a host the frontier has never seen.
        """
        with self._lock, self._conn.transaction():
            self._conn.execute("INSERT INTO hosts(host) VALUES (%s) ON CONFLICT (host) DO NOTHING", (host,))
            row = self._conn.execute(
                "UPDATE hosts SET lease_owner = %(owner)s, lease_until = %(until)s "
                "WHERE host = %(host)s AND next_allowed <= %(now)s AND lease_until < %(now)s "
                "RETURNING backoff_s, errors",
                {"owner": owner, "until": until, "host": host, "now": now},
            ).fetchone()
        return (float(row["backoff_s"]), int(row["errors"])) if row else None

    @_retry_on_conflict
    def reap_expired(self, now: float, *, max_retries: int | None = None) -> list[str]:
        """Return URLs whose lease ran out to pending (one more attempt) and free expired hosts.

        With ``max_retries``, a URL that has used them up ends ``failed`` instead (a URL
        that hangs or kills its worker every time must not come back for ever).
        """
        with self._lock, self._conn.transaction():
            failed = self._fail_used_up("lease_until < %s", (now,), max_retries)
            rows = self._conn.execute(
                "UPDATE urls SET status = 'pending', lease_until = NULL, lease_owner = '', "
                "retries = retries + 1, outcome = 'lease expired' "
                "WHERE status = 'leased' AND lease_until < %s RETURNING url",
                (now,),
            ).fetchall()
            self._conn.execute(
                "UPDATE hosts SET lease_owner = '', lease_until = 0 "
                "WHERE lease_owner != '' AND lease_until < %s",
                (now,),
            )
        if rows:
            logger.warning("Returned %d URLs whose lease expired to pending", len(rows))
        return [r["url"] for r in rows] + failed

    def _fail_used_up(self, where: str, params: tuple[Any, ...], max_retries: int | None) -> list[str]:
        """Inside a transaction: leased URLs matching ``where`` with no retries left → failed."""
        if max_retries is None:
            return []
        rows = self._conn.execute(
            "UPDATE urls SET status = 'failed', lease_until = NULL, lease_owner = '', last_fetch = %s, "
            f"outcome = 'lease expired' WHERE status = 'leased' AND retries >= %s AND {where} RETURNING url",
            (time.time(), max_retries, *params),
        ).fetchall()
        if rows:
            logger.warning("%d URLs whose leases ran out used up their retries: marked failed", len(rows))
        return [r["url"] for r in rows]

    @_retry_on_conflict
    def heartbeat(self, owner: str, now: float, counters: dict[str, Any]) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO workers(worker, started_at, heartbeat_at, counters) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (worker) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, "
                "counters = excluded.counters",
                (owner, now, now, json.dumps(counters)),
            )

    # -- writes --------------------------------------------------------------

    def save_robots(self, policy: Any) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO robots(origin, status, body, fetched_at, expires_at) "
                "VALUES (%(origin)s, %(status)s, %(body)s, %(fetched_at)s, %(expires_at)s) "
                "ON CONFLICT (origin) DO UPDATE SET status = excluded.status, body = excluded.body, "
                "fetched_at = excluded.fetched_at, expires_at = excluded.expires_at",
                {
                    "origin": policy.origin,
                    "status": policy.status,
                    "body": policy.body,
                    "fetched_at": policy.fetched_at,
                    "expires_at": policy.expires_at,
                },
            )

    @_retry_on_conflict
    def release_leases(self, owner: str | None = None, *, max_retries: int | None = None) -> int:
        """Return the URLs (and hosts) leased by ``owner`` — every worker when None — to pending.

        A worker restarting under its own id takes back what it held; the leases of
        other live workers are theirs until they expire. Each released URL counts as an
        attempt (the process holding it died: a poison URL must not be fetched again on
        every restart), and with ``max_retries`` one that has used them up ends ``failed``.
        """
        where, params = ("lease_owner = %s", (owner,)) if owner is not None else ("TRUE", ())
        with self._lock, self._conn.transaction():
            self._fail_used_up(where, params, max_retries)
            cursor = self._conn.execute(
                "UPDATE urls SET status = 'pending', lease_until = NULL, lease_owner = '', "
                f"retries = retries + 1, outcome = 'lease expired' WHERE status = 'leased' AND {where}",
                params,
            )
            self._conn.execute(
                f"UPDATE hosts SET lease_owner = '', lease_until = 0 WHERE lease_owner != '' AND {where}",
                params,
            )
        return cursor.rowcount

    @_retry_on_conflict
    def schedule_recrawl(self, now: float, *, budget: int | None = None, prior_s: float = 86_400.0,
                         importance: Importance = ({}, {}),
                         failed_retry_s: float | None = None) -> int:  # fmt: skip
        """As ``CrawlDb.schedule_recrawl``: every due page, or the ``budget`` best by
        ``crawl.frontier.tiers``; due sitemaps too, outside the budget, and failed pages to try again."""
        with self._lock:
            self._conn.execute(_SITEMAPS_DUE, (now,))
            retried = 0
            if failed_retry_s is not None:
                retried = self._conn.execute(_FAILED_DUE, (now - failed_retry_s,)).rowcount
            if budget is None:
                cursor = self._conn.execute(
                    f"UPDATE urls SET status = 'pending', retries = 0 WHERE {_DUE}", (now,)
                )
                return cursor.rowcount + retried
            rows = self._conn.execute(
                "SELECT url, discovered_at AS first_fetch, last_fetch, fetch_count, change_count, lastmod "
                f"FROM urls WHERE {_DUE}",
                (now,),
            ).fetchall()
            candidates = (DueCandidate(**dict(row)) for row in rows)
            chosen = choose_due(candidates, now, budget, prior_s=prior_s, importance=importance)
            with self._conn.transaction(), self._conn.cursor() as cur:
                cur.executemany(
                    "UPDATE urls SET status = 'pending', retries = 0 WHERE url = %s", [(u,) for u in chosen]
                )
        return len(chosen) + retried

    @_retry_on_conflict
    def record_lastmod(self, lastmods: Mapping[str, float]) -> int:
        """As ``CrawlDb.record_lastmod``: the newest sitemap ``<lastmod>`` of each known URL."""
        if not lastmods:
            return 0
        changed = 0
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            for url, when in sorted(lastmods.items()):  # one lock order across workers
                cur.execute(_SET_LASTMOD, (when, url, when))
                changed += cur.rowcount
        return changed

    @_retry_on_conflict
    def record_cluster_sizes(self, sizes: Mapping[str, int]) -> None:
        """As ``CrawlDb.record_cluster_sizes``, in one statement (a row per URL cost the store
        thread ~35 µs a page of client CPU on the crawl bench, as much as the batch's results)."""
        if not sizes:
            return
        urls = sorted(sizes)  # one lock order across workers
        with self._lock:
            self._conn.execute(_SET_CLUSTER_SIZES, {"urls": urls, "sizes": [sizes[u] for u in urls]})

    @_retry_on_conflict
    def claim_contents(self, claims: Sequence[ContentClaim], max_distance: int) -> dict[str, DupVerdict]:
        """Register new documents as the fleet's originals of their content, unless another
        URL's document already is one: ``{url: verdict}`` for each claim that lost.

        A worker's in-memory index knows only the documents indexed when it started and
        its own, so two workers that fetch copies of one page both index them. This is the
        arbiter: in one transaction, lock the claims' four SimHash blocks, look for an
        original (the same content hash, or a SimHash within ``max_distance`` bits), then
        record the winners. Two near-duplicates share a block, so their claims take a
        common lock and the later one sees the earlier one's row. A URL never loses to
        itself: a retried batch claims again and wins again. A database from before
        ``contents`` gets it filled from its indexed ``urls`` when a worker opens it.
        """
        if not claims:
            return {}
        keys = sorted(
            {(_CONTENT_LOCK + b, value) for c in claims for b, value in enumerate(simhash_blocks(c.simhash))}
        )
        params = {**_claim_arrays(claims), "max_distance": max_distance}
        with self._wlock:
            conn = self._writer()
            with conn.transaction(), conn.cursor() as cur:
                cur.execute(_CLAIM_LOCKS, {"classes": [k[0] for k in keys], "values": [k[1] for k in keys]})
                found = cur.execute(_CLAIM_FIND, params).fetchall()
                lost = {
                    r["url"]: DupVerdict("exact" if r["exact"] else "near", r["owner"], int(r["distance"]))
                    for r in found
                }
                won = [c for c in claims if c.url not in lost]
                if won:
                    cur.execute(_CLAIM_INSERT, _claim_arrays(won))
        return lost

    def forget_cluster_sizes(self) -> None:
        """As ``CrawlDb.forget_cluster_sizes``."""
        with self._lock, self._conn.transaction():
            self._conn.execute("UPDATE urls SET cluster_written = NULL WHERE cluster_written IS NOT NULL")

    @_retry_on_conflict
    def push(self, inserts: Sequence[NewUrl], now: float) -> None:
        """As ``CrawlDb.push``: new URLs added, known ``done`` pages pending again at the given priority."""
        if not inserts:
            return
        with self._lock, self._conn.transaction(), self._conn.cursor() as cur:
            _insert(cur, inserts, now, self.admission_cap)
            cur.executemany(
                "UPDATE urls SET status = 'pending', retries = 0, priority = %s "
                "WHERE url = %s AND status = 'done'",
                [(n.priority, n.url) for n in sorted(inserts, key=lambda n: n.url)],
            )

    @_retry_on_conflict
    def apply(
        self,
        *,
        inserts: Sequence[NewUrl],
        leases: Sequence[tuple[str, float]],
        updates: Sequence[UrlUpdate],
        hosts: Sequence[HostState],
        now: float,
    ) -> None:
        """Write one batch in one transaction (``CrawlDb.apply``'s contract); any thread may call it."""
        with self._wlock:
            conn = self._writer()
            with conn.transaction(), conn.cursor() as cur:
                _insert(cur, inserts, now, self.admission_cap)
                if leases:
                    cur.executemany(_LEASE_URL_ROW, [{"url": url, "until": until} for url, until in leases])
                for rows in _update_rows(updates, now):
                    cur.execute(_UPDATE_URLS, {"rows": json.dumps(rows)})
                logged = fetch_log_rows(updates, now)
                if logged:
                    cur.execute(_LOG_FETCHES, {"rows": json.dumps(logged)})
                if hosts:
                    cur.executemany(_SAVE_HOST, [_params(h) for h in hosts])


def _lease_row(row: dict[str, Any]) -> dict[str, Any]:
    row["backoff_s"] = float(row["backoff_s"])
    row["errors"] = int(row["errors"])
    return row


def _insert(cur: psycopg.Cursor[Any], inserts: Sequence[NewUrl], now: float, cap: int | None = None) -> None:
    """Insert the URLs the fleet does not know yet (inside the caller's transaction).

    With ``cap``, a host's new pending pages past it are stored blocked ("host page budget
    reached"), counted fleet-wide: each worker checks its own count first (``PgFrontier.add``)
    but knows only the pages it admitted itself.
    """
    if not inserts:
        return
    cur.execute(_INSERT_HOSTS, {"hosts": sorted({n.host for n in inserts})})
    candidates = [n for n in inserts if n.kind == UrlKind.PAGE and n.status == UrlStatus.PENDING]
    admitted: dict[str, int] = {}
    if cap is not None and candidates:
        hosts = sorted({n.host for n in candidates})
        cur.execute(_START_ADMISSIONS, {"hosts": hosts})
        admitted = {
            r["host"]: int(r["admitted"]) for r in cur.execute(_LOCK_ADMITTED, {"hosts": hosts}).fetchall()
        }
    rows = [
        {
            "url": n.url,
            "host": n.host,
            "kind": n.kind.value,
            "depth": n.depth,
            "priority": n.priority,
            "status": n.status.value,
            "outcome": n.outcome.value,
            "parent": n.parent,
            "redirects": n.redirects,
            "blocked_reason": n.blocked_reason,
            "dup_of": n.dup_of,
            "lastmod": n.lastmod,
        }
        for n in inserts
    ]
    if not admitted:
        cur.execute(_INSERT_URLS, {"rows": json.dumps(rows), "now": now})
        return
    inserted = {
        r["url"] for r in cur.execute(_INSERT_URLS + " RETURNING url", {"rows": json.dumps(rows), "now": now})
    }
    over: list[str] = []
    for new in candidates:  # in the order the crawl found them, as on one machine
        if new.url in inserted and new.host in admitted:
            if admitted[new.host] >= cast(int, cap):
                over.append(new.url)
            else:
                admitted[new.host] += 1
    if over:
        cur.execute(_OVER_HOST_BUDGET, {"urls": over})
    hosts = sorted(admitted)
    cur.execute(_SET_ADMITTED, {"hosts": hosts, "counts": [admitted[h] for h in hosts]})


def _update_rows(updates: Sequence[UrlUpdate], now: float) -> Iterator[list[dict[str, object]]]:
    """The updates as JSON rows, in statements where each URL appears once (in the order given).

    One ``UPDATE … FROM`` changes a row once however many source rows match it, so a URL
    finished twice in one batch (a retry, leased again) takes a second statement.
    """
    pending = list(updates)
    while pending:
        seen: set[str] = set()
        now_rows: list[dict[str, object]] = []
        later: list[UrlUpdate] = []
        for u in pending:
            if u.url in seen:
                later.append(u)
                continue
            seen.add(u.url)
            now_rows.append(
                {
                    "url": u.url,
                    "status": u.status.value,
                    "outcome": u.outcome_text,
                    "http_status": u.http_status,
                    "content_hash": u.content_hash,
                    "simhash": to_signed64(u.simhash),
                    "etag": u.etag,
                    "last_modified": u.last_modified,
                    "last_fetch": u.attempt_time(now),
                    "next_fetch": u.next_fetch,
                    "interval_s": u.interval_s,
                    "retries": u.retries,
                    "blocked_reason": u.blocked_reason,
                    "dup_of": u.dup_of,
                    "fetched": u.fetched,
                    "changed": u.changed,
                }
            )
        now_rows.sort(key=lambda r: str(r["url"]))  # one lock order across workers
        yield now_rows
        pending = later


def wait_hint(ready_at: float | None, now: float) -> float:
    """How long to sleep before asking for a lease again: until the next host is ready, within bounds."""
    if ready_at is None:
        return 0.1
    return min(0.25, max(0.005, ready_at - now))
