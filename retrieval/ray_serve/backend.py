"""The broker's client for a shard served by Ray Serve: a :class:`ShardBackend` over a deployment handle.

Ray Serve routes each call to one of the shard's replicas. A call that reaches a replica
as it dies (killed, its node lost) is sent again while the query's deadline allows: Serve
routes the retry to a live replica, so a replica lost under load costs a retry, not a
failed query. Every call names the generation the broker serves (:meth:`RayShard.pinned`),
and pinning waits until one replica of the shard has that generation open: the broker of
a new generation exists only once every shard can answer for it (the two-phase switch).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from core.errors import ShardUnavailable
from core.types import DocId, Query
from retrieval.index.lexical import StoredDoc
from retrieval.query.shard_backend import AnnotateRequest, Annotations, ShardReply, ShardRequest

__all__ = ["RayShard"]

READY_TIMEOUT_S = 600.0
"""How long a switch waits for a shard to ship and open a new generation (a large shard
crossing a slow network takes minutes; the old generation serves meanwhile)."""
_RETRIES = 3


def _replica_lost(exc: BaseException) -> bool:
    """Errors that mean the replica went away, not that the shard refused the call."""
    from ray import exceptions as ray_errors  # lazy: Ray only in this layout

    lost = (
        ray_errors.ActorDiedError,
        ray_errors.ActorUnavailableError,
        ray_errors.RayActorError,
        ray_errors.WorkerCrashedError,
        ray_errors.NodeDiedError,
    )
    return isinstance(exc, lost) and not isinstance(exc, ShardUnavailable)


class RayShard:
    """One shard's deployment (every replica behind one handle)."""

    def __init__(self, handle: Any, shard_id: int, *, generation: str | None = None) -> None:
        self.handle = handle
        self.shard_id = shard_id
        self.generation = generation
        self._info: dict[str, Any] = {}

    def pinned(self, generation: str) -> RayShard:
        """This shard asking for ``generation`` in every call, once a replica has it open."""
        twin = RayShard(self.handle, self.shard_id, generation=generation)
        twin._info = twin._call("ready", timeout_s=READY_TIMEOUT_S)
        return twin

    @property
    def num_docs(self) -> int:
        return int(self._info.get("num_docs", 0))

    @property
    def vector_model(self) -> str | None:
        model = self._info.get("vector_model")
        return str(model) if model is not None else None

    def _call(self, method: str, *args: Any, timeout_s: float | None) -> Any:
        if self.generation is None:
            raise ShardUnavailable(f"Shard {self.shard_id}: no generation pinned yet.")
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else READY_TIMEOUT_S)
        for attempt in range(_RETRIES):
            response = getattr(self.handle, method).remote(self.generation, *args)
            left = deadline - time.monotonic()
            try:
                return response.result(timeout_s=max(left, 0.001))
            except TimeoutError:
                response.cancel()
                raise
            except Exception as exc:
                if not _replica_lost(exc) or attempt == _RETRIES - 1 or time.monotonic() >= deadline:
                    raise
        raise AssertionError("unreachable")

    def doc_freqs(self, query: Query, *, timeout_s: float | None = None) -> dict[tuple[str, str], int]:
        result: dict[tuple[str, str], int] = self._call("doc_freqs", query, timeout_s=timeout_s)
        return result

    def candidates(self, request: ShardRequest, *, timeout_s: float | None = None) -> ShardReply:
        reply: ShardReply = self._call("candidates", request, timeout_s=timeout_s)
        return reply

    def annotate(self, request: AnnotateRequest, *, timeout_s: float | None = None) -> Annotations:
        annotations: Annotations = self._call("annotate", request, timeout_s=timeout_s)
        return annotations

    def fetch(self, doc_ids: Sequence[DocId], *, timeout_s: float | None = None) -> dict[DocId, StoredDoc]:
        docs: dict[DocId, StoredDoc] = self._call("fetch", list(doc_ids), timeout_s=timeout_s)
        return docs
