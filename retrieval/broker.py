"""The broker: fans a query out to every shard, with a deadline, hedging and partial results.

Each shard (in-process :class:`LocalShard` by default, or :class:`retrieval.shard_http.HttpShard`
for a ``trawl shard serve`` process) answers in two steps: the document frequencies
of the query's terms (so BM25 is computed with collection-wide statistics, see
:mod:`retrieval.stats`) and then its lexical and vector candidates. The broker waits
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
from retrieval.hybrid import Candidate, merge_shards, shard_candidates
from retrieval.lexical import LexicalShard, StoredDoc
from retrieval.stats import CorpusStats
from retrieval.vector import VectorShard

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


@dataclass(frozen=True, slots=True)
class ShardReply:
    shard_id: int
    candidates: tuple[Candidate, ...]
    lexical_total: int
    has_vectors: bool


class ShardBackend(Protocol):
    """One replica of one shard."""

    shard_id: int

    @property
    def num_docs(self) -> int: ...

    @property
    def vector_model(self) -> str | None:
        """The embedding model of this shard's vectors (None: lexical only)."""
        ...

    def doc_freqs(self, query: Query) -> dict[tuple[str, str], int]: ...

    def candidates(self, request: ShardRequest) -> ShardReply: ...

    def fetch(self, doc_ids: Sequence[DocId]) -> dict[DocId, StoredDoc]: ...


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

    def doc_freqs(self, query: Query) -> dict[tuple[str, str], int]:
        return self.lexical.doc_freqs(query)

    def candidates(self, request: ShardRequest) -> ShardReply:
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
            stats=request.stats,
            totals=total_holder,
        )
        return ShardReply(
            self.shard_id, tuple(candidates), total_holder[0] if total_holder else 0, self.vector is not None
        )

    def fetch(self, doc_ids: Sequence[DocId]) -> dict[DocId, StoredDoc]:
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
        workers: int | None = None,
    ) -> None:
        if not shards or any(not replicas for replicas in shards):
            raise ShardUnavailable("A broker needs at least one replica for every shard.")
        self.shards = [list(replicas) for replicas in shards]
        self.deadline_s = deadline_s
        self.hedge = hedge
        self._latency = {
            phase: [LatencyTracker() for _ in self.shards] for phase in ("stats", "candidates", "fetch")
        }
        # Two pools: per-shard coordinators wait on shard calls, so sharing one pool would
        # let slow (abandoned or hedged) calls starve the coordinators.
        self._pool = ThreadPoolExecutor(max_workers=max(4, 2 * len(self.shards)), thread_name_prefix="broker")
        self._calls = ThreadPoolExecutor(
            max_workers=workers or max(16, 8 * len(self.shards)), thread_name_prefix="shard-call"
        )
        self._num_docs: int | None = None
        self._inline = all(len(r) == 1 and isinstance(r[0], LocalShard) for r in self.shards)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._calls.shutdown(wait=False, cancel_futures=True)

    @property
    def num_docs(self) -> int:
        if self._num_docs is None:
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

    def _call(
        self, shard_no: int, fn: Callable[[ShardBackend], T], deadline: float, *, phase: str
    ) -> tuple[T | None, bool]:
        """Run ``fn`` on a replica of shard ``shard_no``; hedge to another one when slow.

        Returns (result or None, whether a hedge was sent). Never raises.
        """
        replicas = self.shards[shard_no]
        started = time.perf_counter()
        futures: dict[Future[T], int] = {self._calls.submit(fn, replicas[0]): 0}
        hedged = False
        tracker = self._latency[phase][shard_no]
        threshold = tracker.p95() if (self.hedge and len(replicas) > 1) else float("inf")
        errors: list[BaseException] = []
        while futures:
            now = time.perf_counter()
            remaining = deadline - now
            if remaining <= 0:
                break
            timeout = remaining
            if not hedged and threshold < float("inf"):
                timeout = min(remaining, max(0.0, started + threshold - now))
            done, _ = wait(list(futures), timeout=timeout, return_when=FIRST_COMPLETED)
            for future in done:
                futures.pop(future)
                try:
                    result = future.result()
                except Exception as exc:  # noqa: BLE001 - reported as a missing shard
                    errors.append(exc)
                    continue
                tracker.add(time.perf_counter() - started)
                return result, hedged
            if (
                not hedged
                and len(replicas) > 1
                and (not futures or time.perf_counter() >= started + threshold)
            ):
                hedged = True
                futures[self._calls.submit(fn, replicas[1])] = 1
        if errors:
            logger.warning("shard %d failed: %s", shard_no, errors[-1])
        else:
            logger.warning("shard %d missed the deadline", shard_no)
        return None, hedged

    def _fan_out(
        self, fn: Callable[[ShardBackend], T], deadline: float, *, phase: str
    ) -> tuple[list[T | None], list[int]]:
        if self._inline:
            return self._fan_out_inline(fn, deadline, phase=phase), []
        jobs = [
            self._pool.submit(self._call, shard_no, fn, deadline, phase=phase)
            for shard_no in range(len(self.shards))
        ]
        results: list[T | None] = []
        hedged: list[int] = []
        for shard_no, job in enumerate(jobs):
            result, was_hedged = job.result()
            results.append(result)
            if was_hedged:
                hedged.append(shard_no)
        return results, hedged

    def _fan_out_inline(
        self, fn: Callable[[ShardBackend], T], deadline: float, *, phase: str
    ) -> list[T | None]:
        """In-process shards, one after another on the calling thread.

        A local shard answers in well under a millisecond, less than the cost of two
        thread hops, and cannot hang on a network; the deadline is still honoured
        between shards.
        """
        results: list[T | None] = []
        for shard_no, replicas in enumerate(self.shards):
            if time.perf_counter() >= deadline:
                logger.warning("shard %d skipped: deadline passed", shard_no)
                results.append(None)
                continue
            started = time.perf_counter()
            try:
                results.append(fn(replicas[0]))
            except Exception as exc:  # noqa: BLE001 - reported as a missing shard
                logger.warning("shard %d failed: %s", shard_no, exc)
                results.append(None)
                continue
            self._latency[phase][shard_no].add(time.perf_counter() - started)
        return results

    def stats(self, query: Query, deadline: float) -> CorpusStats | None:
        """Collection-wide N and df for ``query`` (None with a single shard)."""
        if len(self.shards) == 1:
            return None
        parts, _ = self._fan_out(lambda s: s.doc_freqs(query), deadline, phase="stats")
        return CorpusStats.merge(self.num_docs, [p for p in parts if p is not None])

    def gather(
        self,
        query: Query,
        *,
        vector: NDArray[np.float32] | None,
        k_lexical: int,
        k_vector: int,
        with_fields: bool = False,
        deadline_s: float | None = None,
    ) -> Gathered:
        started = time.perf_counter()
        deadline = started + (deadline_s if deadline_s is not None else self.deadline_s)
        # Statistics get at most 40% of the budget: a slow shard must not starve the search.
        stats = self.stats(query, started + 0.4 * (deadline - started))
        after_stats = time.perf_counter()
        request = ShardRequest(query, vector, k_lexical, k_vector, stats, with_fields)
        replies, hedged = self._fan_out(lambda s: s.candidates(request), deadline, phase="candidates")
        missing = tuple(i for i, r in enumerate(replies) if r is None)
        want_vectors = vector is not None and k_vector > 0
        missing_vector = tuple(
            i for i, r in enumerate(replies) if want_vectors and (r is None or not r.has_vectors)
        )
        ok = [r for r in replies if r is not None]
        return Gathered(
            candidates=merge_shards(
                [r.candidates for r in ok],
                k_lexical=k_lexical if len(self.shards) > 1 else None,
                k_vector=k_vector if len(self.shards) > 1 else None,
            ),
            lexical_total=sum(r.lexical_total for r in ok),
            missing_shards=missing,
            missing_lexical=missing,
            missing_vector=missing_vector,
            hedged=tuple(hedged),
            timings_ms={
                "stats": (after_stats - started) * 1000,
                "shards": (time.perf_counter() - after_stats) * 1000,
            },
        )

    def fetch(
        self, doc_ids_by_shard: Mapping[int, Sequence[DocId]], deadline: float
    ) -> dict[DocId, StoredDoc]:
        """Stored documents for display, from whichever replica answers."""
        out: dict[DocId, StoredDoc] = {}
        if self._inline:
            for shard_no, ids in doc_ids_by_shard.items():
                if ids:
                    try:
                        out.update(self.shards[shard_no][0].fetch(ids))
                    except Exception as exc:  # noqa: BLE001 - the response will be partial
                        logger.warning("shard %d fetch failed: %s", shard_no, exc)
            return out
        jobs = {
            shard_no: self._pool.submit(
                self._call, shard_no, lambda s, ids=ids: s.fetch(ids), deadline, phase="fetch"
            )
            for shard_no, ids in doc_ids_by_shard.items()
            if ids
        }
        for job in jobs.values():
            result, _ = job.result()
            if result:
                out.update(result)
        return out
