"""Leasing from the fleet's frontier: hosts and their URLs out to workers, and back.

A worker's round (``exchange``) inserts the URLs it found, puts URLs back to pending,
releases the hosts it is done with, and leases ready hosts with their best pending URLs
(``FOR UPDATE SKIP LOCKED``, with an expiry), in one pipelined round trip. So one request
per host is in flight across the fleet and politeness is decided in one place. Leases of
a worker that died expire (``reap_expired``); a live worker renews its own
(``renew_leases``) with its heartbeat.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from crawl.state.pg_session import PgSession, retry_on_conflict
from crawl.state.records import HostState, NewUrl

logger = logging.getLogger(__name__)

__all__ = ["PgLeasing"]

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
over the whole pending frontier (as on a table not analysed yet); the URL is the first
entry of ``urls_pending`` for the host.

Never prepared: the generic plan PostgreSQL settles on after five runs is far slower than
one planned for the actual values."""
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
_IDLE = (
    "SELECT EXISTS (SELECT 1 FROM urls WHERE status = 'pending') AS pending, "
    "EXISTS (SELECT 1 FROM urls WHERE status = 'leased' AND lease_owner != %(owner)s) AS others, "
    "(SELECT MIN(GREATEST(h.next_allowed, h.lease_until)) FROM hosts h WHERE "
    "(SELECT 1 FROM urls p WHERE p.host = h.host AND p.status = 'pending' LIMIT 1) IS NOT NULL) AS ready_at"
)


class PgLeasing(PgSession):
    """The fleet's coordination: leases of hosts and URLs, the page budget, heartbeats."""

    pages_left: int | None = None
    """Pages left of the fleet's budget after the last lease that asked with one."""

    def backlog(self, owner: str) -> tuple[int, int]:
        """(pending URLs, URLs leased by other workers): what the fleet still has to do."""
        r = self._one(
            "SELECT COUNT(*) FILTER (WHERE status = 'pending') AS pending, "
            "COUNT(*) FILTER (WHERE status = 'leased' AND lease_owner != %s) AS others "
            "FROM urls WHERE status IN ('pending', 'leased')",
            (owner,),
        )
        return (int(r["pending"]), int(r["others"])) if r else (0, 0)

    # -- leasing (the fleet's coordination) ------------------------------------

    @retry_on_conflict
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
                    self._insert_urls(cur, inserts, now)
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

    @retry_on_conflict
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

    @retry_on_conflict
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

    @retry_on_conflict
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

    @retry_on_conflict
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

    @retry_on_conflict
    def heartbeat(self, owner: str, now: float, counters: dict[str, Any]) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO workers(worker, started_at, heartbeat_at, counters) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (worker) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, "
                "counters = excluded.counters",
                (owner, now, now, json.dumps(counters)),
            )

    @retry_on_conflict
    def release_leases(
        self, owner: str | None = None, *, max_retries: int | None = None, attempt: bool = True
    ) -> int:
        """Return the URLs (and hosts) leased by ``owner`` — every worker when None — to pending.

        A worker restarting under its own id takes back what it held; the leases of
        other live workers are theirs until they expire. Each released URL counts as an
        attempt (the process holding it died: a poison URL must not be fetched again on
        every restart), and with ``max_retries`` one that has used them up ends ``failed``.
        ``attempt=False`` returns them unchanged (a live worker that could not store them).
        """
        where, params = ("lease_owner = %s", (owner,)) if owner is not None else ("TRUE", ())
        counted = "retries = retries + 1, outcome = 'lease expired'" if attempt else "retries = retries"
        with self._lock, self._conn.transaction():
            if attempt:
                self._fail_used_up(where, params, max_retries)
            cursor = self._conn.execute(
                "UPDATE urls SET status = 'pending', lease_until = NULL, lease_owner = '', "
                f"{counted} WHERE status = 'leased' AND {where}",
                params,
            )
            self._conn.execute(
                f"UPDATE hosts SET lease_owner = '', lease_until = 0 WHERE lease_owner != '' AND {where}",
                params,
            )
        return cursor.rowcount


def _lease_row(row: dict[str, Any]) -> dict[str, Any]:
    row["backoff_s"] = float(row["backoff_s"])
    row["errors"] = int(row["errors"])
    return row
