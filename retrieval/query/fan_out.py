"""One call to every shard by a deadline: per-replica call pools, hedging, cancellation.

The query's own thread submits to each replica's bounded pool and waits on all of them
with one deadline, hedging a shard slower than its recent p95 to its replica (DECISIONS
7, 20). A shard that fails or is late is absent from the answer, never an exception:
the broker reports it as missing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TypeVar

from retrieval.query.circuit import ShardCircuits
from retrieval.query.shard_backend import LocalShard, ShardBackend

logger = logging.getLogger(__name__)
T = TypeVar("T")

PHASES = ("stats", "candidates", "annotate", "fetch")
"""The steps of a query, each with its own latency history per shard."""

PARALLEL_LOCAL_PHASES = frozenset({"candidates", "annotate"})
"""Steps in-process shards run side by side, one thread each, while the broker has one
query in flight: Tantivy, hnswlib and the larger numpy operations release the GIL, and
only these steps cost more than the two thread hops. With several queries in flight the
queries already keep the cores busy, and the hops would only add to each."""

ShardCall = Callable[[ShardBackend, float], T]
"""One call to one replica: ``fn(replica, timeout_s)``, the timeout being what is left of the deadline."""


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


class _DeadlinePassed(Exception):
    """A queued call whose query gave up on it before a worker was free."""


class FanOut:
    """Calls shards (each a list of replicas) by a deadline; never fails on a shard.

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
        hedge: bool = True,
        calls_per_replica: int = 16,
        circuits: ShardCircuits | None = None,
        miss_window_s: float = 0.0,
    ) -> None:
        self.shards = shards
        self.hedge = hedge
        self.circuits = circuits or ShardCircuits(len(shards))
        self.miss_window_s = miss_window_s
        """A call given less time than this is not counted against its shard when it misses: the
        query's deadline ran out elsewhere (fetches after a slow search), not the shard's."""
        self._guarded = [any(not isinstance(r, LocalShard) for r in replicas) for replicas in shards]
        """Shards with a replica in another process: only those can hang, so only their
        circuits open (an in-process shard that fails says why in ``/healthz`` already)."""
        self.latency = {phase: [LatencyTracker() for _ in shards] for phase in PHASES}
        self.inline = all(len(r) == 1 and isinstance(r[0], LocalShard) for r in shards)
        """Every shard is one in-process replica: cheap steps run on the query's thread."""
        self._in_flight = 0
        """Queries in :meth:`query` now (read unlocked: a stale count only picks the other path)."""
        self._in_flight_lock = threading.Lock()
        self._pools: list[list[ThreadPoolExecutor]] = (
            []
            if self.inline and len(shards) == 1
            else [
                [
                    ThreadPoolExecutor(max_workers=calls_per_replica, thread_name_prefix=f"shard{i}-{j}")
                    for j in range(len(replicas))
                ]
                for i, replicas in enumerate(shards)
            ]
        )

    def close(self) -> None:
        self.circuits.close()
        for pools in self._pools:
            for pool in pools:
                pool.shutdown(wait=False, cancel_futures=True)

    @contextmanager
    def query(self) -> Iterator[None]:
        """Counts a query in flight while it runs (several in flight: local steps stay inline)."""
        with self._in_flight_lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._in_flight_lock:
                self._in_flight -= 1

    def everywhere(self, fn: ShardCall[T]) -> dict[int, ShardCall[T]]:
        return dict.fromkeys(range(len(self.shards)), fn)

    @staticmethod
    def _run(fn: ShardCall[T], replica: ShardBackend, deadline: float) -> T:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            raise _DeadlinePassed
        return fn(replica, remaining)

    def _submit(self, shard_no: int, replica_no: int, fn: ShardCall[T], deadline: float) -> Future[T]:
        replica = self.shards[shard_no][replica_no]
        return self._pools[shard_no][replica_no].submit(self._run, fn, replica, deadline)

    def __call__(
        self, calls: Mapping[int, ShardCall[T]], deadline: float, *, phase: str
    ) -> tuple[dict[int, T], list[int]]:
        """Run ``calls[shard_no]`` on a replica of each shard; hedge a slow one to its replica.

        Returns (results of the shards that answered by the deadline, hedged shards).
        Never raises: a shard that fails or is late is simply absent from the results.
        """
        if self.inline and (len(calls) < 2 or phase not in PARALLEL_LOCAL_PHASES or self._in_flight > 1):
            return self._inline(calls, deadline, phase=phase), []
        started = time.perf_counter()
        skipped = {s for s in calls if self._guarded[s] and self.circuits.is_open(s)}
        calls = {s: fn for s, fn in calls.items() if s not in skipped}
        pending: dict[Future[T], int] = {}
        for shard_no, fn in calls.items():
            pending[self._submit(shard_no, 0, fn, deadline)] = shard_no
        thresholds = {
            shard_no: self.latency[phase][shard_no].p95()
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
                self.latency[phase][shard_no].add(time.perf_counter() - started)
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
        given_s = deadline - started
        for shard_no in calls:
            if shard_no in results:
                if self._guarded[shard_no]:
                    self.circuits.succeeded(shard_no)
                continue
            failed = shard_no in errors and not isinstance(errors[shard_no], _DeadlinePassed)
            why = f"failed: {errors[shard_no]}" if failed else "missed the deadline"
            logger.warning("shard %d %s", shard_no, why)
            if self._guarded[shard_no] and (failed or given_s >= self.miss_window_s):
                self.circuits.missed(shard_no, self._probe(shard_no, calls[shard_no]), why[:200])
        return results, sorted(hedged)

    def _probe(self, shard_no: int, fn: ShardCall[T]) -> Callable[[float], object]:
        """The call that missed, tried on each replica of the shard in turn (the prober's)."""

        def probe(timeout_s: float) -> object:
            error: Exception | None = None
            for replica in self.shards[shard_no]:
                try:
                    return fn(replica, timeout_s)
                except Exception as exc:  # noqa: BLE001 - the next replica may answer
                    error = exc
            raise error or RuntimeError("no replica")

        return probe

    def _inline(self, calls: Mapping[int, ShardCall[T]], deadline: float, *, phase: str) -> dict[int, T]:
        """In-process shards, one after another on the calling thread.

        For the cheap steps (statistics, fetches) and a single shard: a local shard
        answers them faster than two thread hops, and cannot hang on a network; the
        deadline is still honoured between shards (DECISIONS 7).
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
            self.latency[phase][shard_no].add(time.perf_counter() - started)
        return results
