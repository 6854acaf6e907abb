"""Duplicates decided for the whole fleet: a batch's new documents are claimed in PostgreSQL.

The batch writer (``crawl.state.content_claims.ContentClaims``) claims each new document
before its batch is stored; the claim is won unless another URL's document already holds
the content (the same hash, or a SimHash within a few bits), and a lost claim makes the
URL a duplicate of that original (DECISIONS 52). Runs on the batch writer's connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crawl.extraction.dedup import ContentClaim, DupVerdict, simhash_blocks
from crawl.state.pg_session import PgSession, retry_on_conflict
from crawl.state.records import to_signed64

__all__ = ["PgContentClaims"]

_CONTENT_LOCK = 7_316_100
"""First of four ``pg_advisory_xact_lock(class, value)`` classes, one per 16-bit SimHash block
(the two-key space does not overlap the one-key space of the schema lock, ``crawl.state.pg_schema``)."""
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


class PgContentClaims(PgSession):
    """``claim_contents``: the fleet's arbiter of which URL's document is a content's original."""

    @retry_on_conflict
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
        with self._batch_transaction() as cur:
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
