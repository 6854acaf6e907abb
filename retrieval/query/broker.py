"""The broker: fans a query out to every shard, with a deadline, hedging and partial results.

Each shard (:mod:`retrieval.query.shard_backend`) first gives the document frequencies
of the query's terms, so BM25 is computed with collection-wide statistics, then its
lexical and vector candidates, which the broker merges. The calls go through
:class:`retrieval.query.fan_out.FanOut`: at most ``deadline_s``, a slow shard hedged to
a replica when one exists, and a shard that fails or misses the deadline reported in
``missing_shards`` (with lexical and vector coverage separately) instead of failing
the query; a remote shard that keeps missing is skipped at once until it answers a probe
(:mod:`retrieval.query.circuit`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from core.errors import ShardUnavailable
from core.types import DocId, Query
from retrieval.index.collection_stats import CorpusStats
from retrieval.index.forward_features import ShardFeatures
from retrieval.index.lexical import DF_CACHE_TERMS, StoredDoc
from retrieval.index.lexical_query import stat_terms
from retrieval.query.circuit import ShardCircuits
from retrieval.query.fan_out import FanOut, ShardCall
from retrieval.query.hybrid import Candidate, CandidateFields, merge_shards
from retrieval.query.shard_backend import AnnotateRequest, Annotations, ShardBackend, ShardRequest

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Gathered:
    """What the shards returned for one query, merged."""

    candidates: list[Candidate]
    lexical_total: int
    missing_shards: tuple[int, ...]
    missing_lexical: tuple[int, ...]
    missing_vector: tuple[int, ...]
    hedged: tuple[int, ...] = ()
    timings_ms: dict[str, float] = field(default_factory=dict)
    features: ShardFeatures | None = None
    """Shard-computed features of the candidates (None unless every shard sent them)."""
    approximate_scores: bool = False
    """A shard missed the statistics step, so BM25 used the other shards' document
    frequencies (or each shard its own): every shard answered, but a later search of the
    same query may score it differently, so the answer must not be cached."""

    @property
    def partial(self) -> bool:
        return bool(self.missing_shards or self.missing_vector)


class Broker:
    """Fans out to shards (each a list of replicas), merges, never fails on a shard."""

    def __init__(
        self,
        shards: Sequence[Sequence[ShardBackend]],
        *,
        deadline_s: float = 1.0,
        hedge: bool = True,
        calls_per_replica: int = 16,
        trip_after: int = 3,
        probe_every_s: float = 1.0,
    ) -> None:
        if not shards or any(not replicas for replicas in shards):
            raise ShardUnavailable("A broker needs at least one replica for every shard.")
        self.shards = [list(replicas) for replicas in shards]
        self.deadline_s = deadline_s
        self.circuits = ShardCircuits(
            len(self.shards), trip_after=trip_after, probe_every_s=probe_every_s, probe_timeout_s=deadline_s
        )
        self._calls = FanOut(
            self.shards,
            hedge=hedge,
            calls_per_replica=calls_per_replica,
            circuits=self.circuits,
            miss_window_s=0.25 * deadline_s,
        )
        self._num_docs: int | None = None
        self._df: dict[str, dict[tuple[str, str], int]] = {}
        """Per analysed term, its collection-wide (field, term) frequencies: a broker serves one
        opened generation (an update reopens it with a new broker), so they never change."""

    def close(self) -> None:
        self._calls.close()

    @property
    def num_docs(self) -> int:
        """Summed once for in-process shards; remote ones report theirs with every answer."""
        if self._num_docs is None or not self._calls.inline:
            total = 0
            for replicas in self.shards:
                for replica in replicas:
                    try:
                        total += replica.num_docs
                        break
                    except Exception as exc:  # noqa: BLE001 - a dead replica is skipped, not fatal
                        logger.warning("shard %s did not report its size: %s", replica.shard_id, exc)
            self._num_docs = total
        return self._num_docs

    def stats(self, query: Query, deadline: float) -> CorpusStats | None:
        """Collection-wide N and df for ``query`` (None with a single shard).

        Asked of the shards only for terms not seen before: a query of known terms skips
        the statistics round trip.
        """
        return self._stats(query, deadline)[0]

    def _stats(self, query: Query, deadline: float) -> tuple[CorpusStats | None, bool]:
        """:meth:`stats`, and whether every shard's frequencies are in them."""
        if len(self.shards) == 1:
            return None, True
        terms = stat_terms(query)
        known = self._df
        cached = [known.get(t) for t in terms]
        if all(c is not None for c in cached):
            merged = {k: v for c in cached if c is not None for k, v in c.items()}
            return CorpusStats(self.num_docs, merged), True
        parts, _ = self._calls(
            self._calls.everywhere(lambda s, t: s.doc_freqs(query, timeout_s=t)), deadline, phase="stats"
        )
        if not parts:
            # No frequencies at all would read as df = 0 everywhere and inflate every
            # score many times over; each shard's own statistics are the better guess.
            logger.warning("no shard answered the statistics step: shards score with their own")
            return None, False
        stats = CorpusStats.merge(self.num_docs, list(parts.values()))
        complete = len(parts) == len(self.shards)
        if complete:  # a shard that did not answer would undercount
            by_term: dict[str, dict[tuple[str, str], int]] = {t: {} for t in terms}
            for key, value in stats.doc_freq.items():
                by_term.setdefault(key[1], {})[key] = value
            if len(known) + len(by_term) > DF_CACHE_TERMS:
                known.clear()
            known.update(by_term)
        return stats, complete

    def term_doc_freqs(self, query: Query, deadline: float) -> dict[tuple[str, str], int]:
        """Document frequencies of the query's (field, term) pairs over the live shards, one
        shard included, summed over those that answered: whether a word is in the index now,
        updates since the build included (the speller asks before correcting it)."""
        parts, _ = self._calls(
            self._calls.everywhere(lambda s, t: s.doc_freqs(query, timeout_s=t)), deadline, phase="stats"
        )
        total: dict[tuple[str, str], int] = {}
        for part in parts.values():
            for key, count in part.items():
                total[key] = total.get(key, 0) + count
        return total

    def gather(
        self,
        query: Query,
        *,
        vector: NDArray[np.float32] | None,
        k_lexical: int,
        k_vector: int,
        with_fields: bool = False,
        with_doc_vectors: bool = False,
        deadline_s: float | None = None,
    ) -> Gathered:
        with self._calls.query():
            return self._gather(query, vector, k_lexical, k_vector, with_fields, with_doc_vectors, deadline_s)

    def _gather(
        self,
        query: Query,
        vector: NDArray[np.float32] | None,
        k_lexical: int,
        k_vector: int,
        with_fields: bool,
        with_doc_vectors: bool,
        deadline_s: float | None,
    ) -> Gathered:
        started = time.perf_counter()
        deadline = started + (deadline_s if deadline_s is not None else self.deadline_s)
        # Statistics get at most 40% of the budget: a slow shard must not starve the search.
        stats, stats_complete = self._stats(query, started + 0.4 * (deadline - started))
        after_stats = time.perf_counter()
        # With several shards a learned stage's fields come in a second step, for the
        # candidates that survive the global cut only (see AnnotateRequest).
        two_step = with_fields and len(self.shards) > 1
        one_step = with_fields and not two_step
        request = ShardRequest(
            query,
            vector,
            k_lexical,
            k_vector,
            stats,
            one_step,
            with_doc_vectors=one_step and with_doc_vectors,
        )
        answered, hedged = self._calls(
            self._calls.everywhere(lambda s, t: s.candidates(request, timeout_s=t)),
            deadline,
            phase="candidates",
        )
        replies = [answered.get(i) for i in range(len(self.shards))]
        missing = tuple(i for i, r in enumerate(replies) if r is None)
        want_vectors = vector is not None and k_vector > 0
        missing_vector = tuple(
            i for i, r in enumerate(replies) if want_vectors and (r is None or not r.has_vectors)
        )
        ok = [r for r in replies if r is not None]
        candidates = merge_shards(
            [r.candidates for r in ok],
            k_lexical=k_lexical if len(self.shards) > 1 else None,
            k_vector=k_vector if len(self.shards) > 1 else None,
        )
        after_candidates = time.perf_counter()
        if two_step:
            shard_no = {r.shard_id: i for i, r in enumerate(replies) if r is not None}
            candidates, features, failed, hedged_later = self._annotate(
                query, vector, stats, candidates, shard_no, deadline, with_doc_vectors=with_doc_vectors
            )
            missing = tuple(sorted({*missing, *failed}))
            hedged = [*hedged, *hedged_later]
        else:
            parts = [r.features for r in ok]
            complete = [p for p in parts if p is not None]
            features = ShardFeatures.merge(complete) if ok and len(complete) == len(parts) else None
        timings = {
            "stats": (after_stats - started) * 1000,
            "shards": (after_candidates - after_stats) * 1000,
        }
        if two_step:
            timings["annotate"] = (time.perf_counter() - after_candidates) * 1000
        return Gathered(
            candidates=candidates,
            lexical_total=sum(r.lexical_total for r in ok),
            missing_shards=missing,
            missing_lexical=missing,
            missing_vector=missing_vector,
            hedged=tuple(sorted(set(hedged))),
            timings_ms=timings,
            features=features,
            approximate_scores=not stats_complete,
        )

    def _annotate(
        self,
        query: Query,
        vector: NDArray[np.float32] | None,
        stats: CorpusStats | None,
        candidates: list[Candidate],
        shard_no: Mapping[int, int],
        deadline: float,
        *,
        with_doc_vectors: bool,
    ) -> tuple[list[Candidate], ShardFeatures | None, tuple[int, ...], list[int]]:
        """Fields, exact cosines and features of the kept candidates, from their shards
        (with the shards that failed this step and those hedged in it).

        A shard that fails this step loses its candidates (reported as missing, like a
        shard that failed the first step): a learned ranker cannot score them alike.
        """
        by_shard: dict[int, list[Candidate]] = {}
        for c in candidates:
            by_shard.setdefault(shard_no[c.shard_id], []).append(c)

        def call(members: list[Candidate]) -> ShardCall[Annotations]:
            request = AnnotateRequest(
                query,
                vector,
                stats,
                tuple(c.doc_id for c in members),
                tuple(c.doc_id for c in members if c.cosine is None and vector is not None),
                with_doc_vectors,
            )
            return lambda s, t: s.annotate(request, timeout_s=t)

        answered, hedged = self._calls(
            {no: call(members) for no, members in by_shard.items()}, deadline, phase="annotate"
        )
        failed = tuple(no for no in by_shard if no not in answered)
        kept = [c for c in candidates if shard_no[c.shard_id] in answered]
        out = CandidateFields.merge([got.fields for got in answered.values()]).apply(kept)
        parts = [answered[no].features for no in sorted(answered)]
        complete = [p for p in parts if p is not None]
        features = ShardFeatures.merge(complete) if complete and len(complete) == len(parts) else None
        return out, features, failed, hedged

    def fetch(
        self, doc_ids_by_shard: Mapping[int, Sequence[DocId]], deadline: float
    ) -> dict[DocId, StoredDoc]:
        """Stored documents for display, from whichever replica answers."""
        return self.fetch_reporting(doc_ids_by_shard, deadline)[0]

    def fetch_reporting(
        self, doc_ids_by_shard: Mapping[int, Sequence[DocId]], deadline: float
    ) -> tuple[dict[DocId, StoredDoc], tuple[int, ...]]:
        """:meth:`fetch`, and the shards that did not answer: a document missing from the
        result is then unknown rather than absent (a 503, not a 404)."""

        def fetch_call(ids: Sequence[DocId]) -> ShardCall[dict[DocId, StoredDoc]]:
            return lambda s, t: s.fetch(ids, timeout_s=t)

        calls = {shard_no: fetch_call(ids) for shard_no, ids in doc_ids_by_shard.items() if ids}
        found, _ = self._calls(calls, deadline, phase="fetch")
        out: dict[DocId, StoredDoc] = {}
        for docs in found.values():
            out.update(docs)
        return out, tuple(sorted(set(calls) - set(found)))
