"""What a batch writes to PostgreSQL: new URLs under the fleet's per-host cap, results, fetch log, hosts.

Set-based: one statement per kind of row, not one per row, each row sent in a JSON array
or as column arrays (``unnest``). Rows are written in one order (by URL, by host) so two
workers writing overlapping batches take their row locks in one order. The frontier's
rounds insert new URLs the same way (``PgLeasing.exchange``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import cast

from crawl.state.base import LEASE_URL, POSTGRES, Writer, render
from crawl.state.records import (
    HostState,
    NewUrl,
    UrlKind,
    UrlStatus,
    UrlUpdate,
    fetch_log_rows,
    record_params,
    to_signed64,
)

__all__ = ["SET_CLUSTER_SIZES", "insert_urls", "write_results"]

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
_LEASE_URL = render(LEASE_URL, POSTGRES)
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
transaction, and workers took turns at leasing nothing (DECISIONS 41)."""
_SET_ADMITTED = (
    "UPDATE host_admissions SET admitted = v.n FROM unnest(%(hosts)s::text[], %(counts)s::int[]) "
    "AS v(host, n) WHERE host_admissions.host = v.host"
)
_OVER_HOST_BUDGET = (
    "UPDATE urls SET status = 'blocked', outcome = 'blocked', blocked_reason = 'host page budget reached' "
    "WHERE url = ANY(%(urls)s) AND status = 'pending'"
)
SET_CLUSTER_SIZES = (
    "UPDATE urls SET cluster_written = v.size "
    "FROM unnest(%(urls)s::text[], %(sizes)s::int[]) AS v(url, size) WHERE urls.url = v.url"
)


def insert_urls(cur: Writer, inserts: Sequence[NewUrl], now: float, cap: int | None = None) -> None:
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


def write_results(
    cur: Writer,
    leases: Sequence[tuple[str, float]],
    updates: Sequence[UrlUpdate],
    hosts: Sequence[HostState],
    now: float,
) -> None:
    """Inside the caller's transaction: a batch's leases (url, until), results, fetch log and host state."""
    if leases:
        cur.executemany(_LEASE_URL, [{"url": url, "until": until} for url, until in leases])
    for rows in _update_rows(updates, now):
        cur.execute(_UPDATE_URLS, {"rows": json.dumps(rows)})
    logged = fetch_log_rows(updates, now)
    if logged:
        cur.execute(_LOG_FETCHES, {"rows": json.dumps(logged)})
    if hosts:
        cur.executemany(_SAVE_HOST, [record_params(h) for h in hosts])
