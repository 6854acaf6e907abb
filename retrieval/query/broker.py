"""The broker: fans a query out to every shard, with a deadline, hedging and partial results.

Each shard (in-process :class:`LocalShard` by default, or :class:`retrieval.remote.shard_http.HttpShard`
for a ``trawl shard serve`` process) answers in two steps: the document frequencies
of the query's terms (so BM25 is computed with collection-wide statistics, see
:mod:`retrieval.index.collection_stats`) and then its lexical and vector candidates. The broker waits
at most ``deadline_s``; a shard slower than its own recent p95 gets a hedged request
to a replica when one exists; a shard that fails or misses the deadline is reported
in ``missing_shards`` (with lexical and vector coverage separately) instead of failing
the query.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from core.errors import ShardUnavailable
from core.types import DocId, Query
from retrieval.index.collection_stats import CorpusStats
from retrieval.index.forward import QueryTerms, ShardFeatures, shard_features
from retrieval.index.lexical import DF_CACHE_TERMS, LexicalShard, StoredDoc, stat_terms
from retrieval.query.hybrid import Candidate, CandidateFields, merge_shards, shard_candidates
from retrieval.vectors.hnsw import VectorShard

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ShardRequest:
    query: Query
    vector: NDArray[np.float32] | None
    k_lexical: int
    k_vector: int
    stats: CorpusStats | None
    with_fields: bool = False
    with_doc_vectors: bool = False
    """With ``with_fields``: the candidates' document vectors too (only ``dense_prf`` reads them)."""


@dataclass(frozen=True, slots=True)
class ShardReply:
    shard_id: int
    candidates: tuple[Candidate, ...]
    lexical_total: int
    has_vectors: bool
    features: ShardFeatures | None = None
    """Per-candidate features from the shard's forward index, when the request wanted fields."""


@dataclass(frozen=True, slots=True)
class AnnotateRequest:
    """The second step of a learned-ranker query on a multi-shard index.

    After the broker cut the merged candidates to the global top-k, each shard adds
    what only it can compute for *its kept* candidates: per-field BM25, the exact
    cosine of those outside its vector top-k (``needs_cosine``), and the forward-index
    features. Computing them before the cut did the work for every shard's whole list,
    about half of which the cut drops at two shards.
    """

    query: Query
    vector: NDArray[np.float32] | None
    stats: CorpusStats | None
    doc_ids: tuple[DocId, ...]
    needs_cosine: tuple[DocId, ...]
    with_doc_vectors: bool = False


@dataclass(frozen=True, slots=True)
class Annotations:
    fields: CandidateFields
    features: ShardFeatures | None


class ShardBackend(Protocol):
    """One replica of one shard."""

    shard_id: int

    @property
    def num_docs(self) -> int: ...

    @property
    def vector_model(self) -> str | None:
        """The embedding model of this shard's vectors (None: lexical only)."""
        ...

    # ``timeout_s``: what is left of the query's deadline; a remote replica must give up
    # by then (a call held past it would only hold a thread the next query needs).

    def doc_freqs(self, query: Query, *, timeout_s: float | None = None) -> dict[tuple[str, str], int]: ...

    def candidates(self, request: ShardRequest, *, timeout_s: float | None = None) -> ShardReply: ...

    def annotate(self, request: AnnotateRequest, *, timeout_s: float | None = None) -> Annotations: ...

    def fetch(
        self, doc_ids: Sequence[DocId], *, timeout_s: float | None = None
    ) -> dict[DocId, StoredDoc]: ...


class LocalShard:
    """A shard opened in this process: its Tantivy index and, when built, its HNSW index."""

    def __init__(self, shard_id: int, lexical: LexicalShard, vector: VectorShard | None = None) -> None:
        self.shard_id = shard_id
        self.lexical = lexical
        self.vector = vector

    @property
    def num_docs(self) -> int:
        return self.lexical.num_docs

    @property
    def vector_model(self) -> str | None:
        return self.vector.model_id if self.vector is not None else None

    # timeout_s is accepted and ignored: an in-process call cannot hang on a network.

    def doc_freqs(self, query: Query, *, timeout_s: float | None = None) -> dict[tuple[str, str], int]:
        return self.lexical.doc_freqs(query)

    def candidates(self, request: ShardRequest, *, timeout_s: float | None = None) -> ShardReply:
        total_holder: list[int] = []
        candidates = shard_candidates(
            self.lexical,
            self.vector,
            request.query,
            request.vector,
            k_lexical=request.k_lexical,
            k_vector=request.k_vector if self.vector is not None else 0,
            shard_id=self.shard_id,
            with_fields=request.with_fields,
            with_doc_vectors=request.with_doc_vectors,
            stats=request.stats,
            totals=total_holder,
        )
        forward = self.lexical.forward
        features = None
        if request.with_fields and forward is not None:
            # Learned stages ask for fields; their text features are computed here, where
            # the documents live, so shard processes compute them in parallel. A candidate
            # updated in place since the forward index was written (see
            # ``LexicalShardWriter.commit_update``) gives None: the stored-text path.
            features = shard_features(forward, QueryTerms.of(request.query), [c.doc_id for c in candidates])
        return ShardReply(
            self.shard_id,
            tuple(candidates),
            total_holder[0] if total_holder else 0,
            self.vector is not None,
            features,
        )

    def annotate(self, request: AnnotateRequest, *, timeout_s: float | None = None) -> Annotations:
        fields = CandidateFields.compute(
            self.lexical,
            self.vector,
            request.query,
            request.vector,
            request.stats,
            request.doc_ids,
            request.needs_cosine,
            with_doc_vectors=request.with_doc_vectors,
        )
        forward = self.lexical.forward
        features = None
        if forward is not None:
            features = shard_features(forward, QueryTerms.of(request.query), request.doc_ids)
        return Annotations(fields, features)

    def fetch(self, doc_ids: Sequence[DocId], *, timeout_s: float | None = None) -> dict[DocId, StoredDoc]:
        return self.lexical.stored_many(doc_ids)


class LatencyTracker:
    """Recent latencies of one shard, for its p95 (the hedging threshold)."""

    def __init__(self, window: int = 200, floor_s: float = 0.005) -> None:
        self._samples: deque[float] = deque(maxlen=window)
        self._floor_s = floor_s
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self._samples.append(seconds)

    def p95(self) -> float:
        with self._lock:
            if len(self._samples) < 20:
                return float("inf")  # not enough history: never hedge blindly
            ordered = sorted(self._samples)
        return max(self._floor_s, ordered[int(0.95 * (len(ordered) - 1))])


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


class _DeadlinePassed(Exception):
    """A queued call whose query gave up on it before a worker was free."""


PARALLEL_LOCAL_PHASES = frozenset({"candidates", "annotate"})
"""Steps in-process shards run side by side, one thread each, while the broker has one
query in flight: Tantivy, hnswlib and the larger numpy operations release the GIL, and
these steps cost milliseconds a shard (statistics and fetches cost less than the two
thread hops). With several queries in flight the queries already keep the cores busy,
and the hops would only add to each."""

ShardCall = Callable[[ShardBackend, float], T]
"""One call to one replica: ``fn(replica, timeout_s)``, the timeout being what is left of the deadline."""


class Broker:
    """Fans out to shards (each a list of replicas), merges, never fails on a shard.

    Every replica has its own bounded pool of call threads, and the thread of the
    query waits on its calls itself: a hung replica can hold only its own threads
    (each for at most the rest of a deadline, the call's timeout), so calls to the
    other shards never queue behind it. Calls still queued when their query gives up
    are cancelled, so a hung shard's queue stays as long as the queries in flight.
    """

    def __init__(
        self,
        shards: Sequence[Sequence[ShardBackend]],
        *,
        deadline_s: float = 1.0,
        hedge: bool = True,
        calls_per_replica: int = 16,
    ) -> None:
        if not shards or any(not replicas for replicas in shards):
            raise ShardUnavailable("A broker needs at least one replica for every shard.")
        self.shards = [list(replicas) for replicas in shards]
        self.deadline_s = deadline_s
        self.hedge = hedge
        self._latency = {
            phase: [LatencyTracker() for _ in self.shards]
            for phase in ("stats", "candidates", "annotate", "fetch")
        }
        self._num_docs: int | None = None
        self._df: dict[str, dict[tuple[str, str], int]] = {}
        """Per analysed term, its collection-wide (field, term) frequencies: a broker serves one
        opened generation (an update reopens it with a new broker), so they never change."""
        self._inline = all(len(r) == 1 and isinstance(r[0], LocalShard) for r in self.shards)
        self._in_flight = 0
        """Queries in :meth:`gather` now (read unlocked: a stale count only picks the other path)."""
        self._in_flight_lock = threading.Lock()
        self._pools: list[list[ThreadPoolExecutor]] = (
            []
            if self._inline and len(self.shards) == 1
            else [
                [
                    ThreadPoolExecutor(max_workers=calls_per_replica, thread_name_prefix=f"shard{i}-{j}")
                    for j in range(len(replicas))
                ]
                for i, replicas in enumerate(self.shards)
            ]
        )

    def close(self) -> None:
        for pools in self._pools:
            for pool in pools:
                pool.shutdown(wait=False, cancel_futures=True)

    @property
    def num_docs(self) -> int:
        """Summed once for in-process shards; remote ones report theirs with every answer."""
        if self._num_docs is None or not self._inline:
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

    @staticmethod
    def _run(fn: ShardCall[T], replica: ShardBackend, deadline: float) -> T:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            raise _DeadlinePassed
        return fn(replica, remaining)

    def _submit(self, shard_no: int, replica_no: int, fn: ShardCall[T], deadline: float) -> Future[T]:
        replica = self.shards[shard_no][replica_no]
        return self._pools[shard_no][replica_no].submit(self._run, fn, replica, deadline)

    def _fan_out(
        self, calls: Mapping[int, ShardCall[T]], deadline: float, *, phase: str
    ) -> tuple[dict[int, T], list[int]]:
        """Run ``calls[shard_no]`` on a replica of each shard; hedge a slow one to its replica.

        Returns (results of the shards that answered by the deadline, hedged shards).
        Never raises: a shard that fails or is late is simply absent from the results.
        """
        if self._inline and (len(calls) < 2 or phase not in PARALLEL_LOCAL_PHASES or self._in_flight > 1):
            return self._fan_out_inline(calls, deadline, phase=phase), []
        started = time.perf_counter()
        pending: dict[Future[T], int] = {}
        for shard_no, fn in calls.items():
            pending[self._submit(shard_no, 0, fn, deadline)] = shard_no
        thresholds = {
            shard_no: self._latency[phase][shard_no].p95()
            if self.hedge and len(self.shards[shard_no]) > 1
            else float("inf")
            for shard_no in calls
        }
        results: dict[int, T] = {}
        hedged: set[int] = set()
        errors: dict[int, BaseException] = {}

        def waiting(shard_no: int) -> bool:
            return any(s == shard_no for s in pending.values())

        while pending:
            now = time.perf_counter()
            remaining = deadline - now
            if remaining <= 0:
                break
            next_hedge = min(
                (started + t for s, t in thresholds.items() if s not in results and s not in hedged),
                default=float("inf"),
            )
            timeout = min(remaining, max(0.0, next_hedge - now))
            done, _ = wait(list(pending), timeout=timeout, return_when=FIRST_COMPLETED)
            for future in done:
                # A replica's answer already dropped its twin from ``pending`` when both
                # finished within the same wait.
                popped = pending.pop(future, None)
                if popped is None or popped in results:
                    continue
                shard_no = popped
                try:
                    results[shard_no] = future.result()
                except Exception as exc:  # noqa: BLE001 - reported as a missing shard
                    errors[shard_no] = exc
                    continue
                self._latency[phase][shard_no].add(time.perf_counter() - started)
                for other, s in list(pending.items()):
                    if s == shard_no:
                        other.cancel()
                        pending.pop(other)
            now = time.perf_counter()
            for shard_no in calls:
                if (
                    shard_no not in results
                    and shard_no not in hedged
                    and len(self.shards[shard_no]) > 1
                    and (not waiting(shard_no) or now >= started + thresholds[shard_no])
                ):
                    hedged.add(shard_no)
                    pending[self._submit(shard_no, 1, calls[shard_no], deadline)] = shard_no
        for future in pending:
            future.cancel()  # a queued call to a hung replica is dropped, not run late
        for shard_no in calls:
            if shard_no not in results:
                if shard_no in errors and not isinstance(errors[shard_no], _DeadlinePassed):
                    logger.warning("shard %d failed: %s", shard_no, errors[shard_no])
                else:
                    logger.warning("shard %d missed the deadline", shard_no)
        return results, sorted(hedged)

    def _fan_out_inline(
        self, calls: Mapping[int, ShardCall[T]], deadline: float, *, phase: str
    ) -> dict[int, T]:
        """In-process shards, one after another on the calling thread.

        For the cheap steps (statistics, fetches) and a single shard: a local shard
        answers them in well under a millisecond, less than the cost of two thread
        hops, and cannot hang on a network; the deadline is still honoured between
        shards.
        """
        results: dict[int, T] = {}
        for shard_no, fn in calls.items():
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                logger.warning("shard %d skipped: deadline passed", shard_no)
                continue
            started = time.perf_counter()
            try:
                results[shard_no] = fn(self.shards[shard_no][0], remaining)
            except Exception as exc:  # noqa: BLE001 - reported as a missing shard
                logger.warning("shard %d failed: %s", shard_no, exc)
                continue
            self._latency[phase][shard_no].add(time.perf_counter() - started)
        return results

    def _everywhere(self, fn: ShardCall[T]) -> dict[int, ShardCall[T]]:
        return dict.fromkeys(range(len(self.shards)), fn)

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
        parts, _ = self._fan_out(
            self._everywhere(lambda s, t: s.doc_freqs(query, timeout_s=t)), deadline, phase="stats"
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
        parts, _ = self._fan_out(
            self._everywhere(lambda s, t: s.doc_freqs(query, timeout_s=t)), deadline, phase="stats"
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
        with self._in_flight_lock:
            self._in_flight += 1
        try:
            return self._gather(query, vector, k_lexical, k_vector, with_fields, with_doc_vectors, deadline_s)
        finally:
            with self._in_flight_lock:
                self._in_flight -= 1

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
        answered, hedged = self._fan_out(
            self._everywhere(lambda s, t: s.candidates(request, timeout_s=t)), deadline, phase="candidates"
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

        answered, hedged = self._fan_out(
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
        found, _ = self._fan_out(calls, deadline, phase="fetch")
        out: dict[DocId, StoredDoc] = {}
        for docs in found.values():
            out.update(docs)
        return out, tuple(sorted(set(calls) - set(found)))
