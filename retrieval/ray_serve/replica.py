"""One replica of one shard under Ray Serve: the shard's generations, shipped to this node and opened.

The replica answers the calls :class:`retrieval.query.shard_backend.ShardBackend` names,
each pinned to a generation by the broker. It keeps the few generations a broker may
still ask for open (``search.open_generations``) and, in the background, loads the one the
index root publishes as soon as it appears, so the broker's switch (which waits for one
ready replica per shard) finds most replicas ready too. An in-place update of the served
generation (the continuous loop, pushed documents) is shipped and reopened the same way.
Calls run in threads: Tantivy and hnswlib block and release the GIL.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from core.errors import ShardUnavailable
from core.settings import SearchSettings
from core.types import DocId, Query
from retrieval.index.generation import open_shard
from retrieval.index.lexical import StoredDoc
from retrieval.index.lexical_query import FieldBoosts
from retrieval.query.shard_backend import (
    AnnotateRequest,
    Annotations,
    FailedShard,
    LocalShard,
    ShardReply,
    ShardRequest,
)
from retrieval.ray_serve.shipping import NodeStore, ShardListing, node_data_dir

logger = logging.getLogger(__name__)

__all__ = ["ShardReplica"]


class _Opened:
    def __init__(self, listing: ShardListing, shard: LocalShard | FailedShard, pin: int) -> None:
        self.listing = listing
        self.shard = shard
        self.pin = pin
        """The shared lock on its view folder, held while it is open."""


class ShardReplica:
    """What Ray Serve runs as each replica of ``trawl-shard-N`` (:mod:`retrieval.ray_serve.deploy`)."""

    def __init__(
        self, shard_id: int, source_name: str, namespace: str, node_data: str, settings: dict[str, Any]
    ) -> None:
        import ray  # lazy: only replicas and the deploying driver import Ray

        self.shard_id = shard_id
        self.settings = SearchSettings.model_validate(settings)
        self.boosts = FieldBoosts.from_settings(self.settings)
        self.source = ray.get_actor(source_name, namespace=namespace)
        self.store = NodeStore(node_data_dir(node_data))
        self._opened: OrderedDict[str, _Opened] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}
        self._stop = threading.Event()
        self._follower = threading.Thread(target=self._follow, name="generation-follower", daemon=True)
        self._ray: Any = ray
        published: str = self._ray.get(self.source.published.remote())[0]
        self._load(published)
        self._follower.start()

    # -- generations -------------------------------------------------------------------

    def _follow(self, every_s: float = 1.0) -> None:
        """Load what the index root publishes (and its in-place updates) before it is asked for."""
        while not self._stop.wait(every_s):
            try:
                generation: str
                stamp: tuple[int, int] | None
                generation, stamp = self._ray.get(self.source.published.remote(), timeout=30)
                opened = self._opened.get(generation)
                if opened is None or opened.listing.stamp != stamp:
                    self._load(generation)
            except Exception as exc:  # noqa: BLE001 - the next round tries again; calls still answer
                logger.warning("shard %d: following the published generation failed: %s", self.shard_id, exc)

    def _load(self, generation: str) -> _Opened:
        """``generation``'s shard, shipped here and opened (once at a time per generation)."""
        with self._lock:
            gate = self._loading.setdefault(generation, threading.Lock())
        with gate:
            listing: ShardListing = self._ray.get(self.source.listing.remote(generation, self.shard_id))
            with self._lock:
                known = self._opened.get(generation)
            if known is not None and known.listing == listing:
                return known
            pin = self.store.hold(self.store.view_dir(listing, self.shard_id))
            try:
                path = self.store.materialize(listing, self.shard_id, self._read)
            except BaseException:
                self.store.release(pin)
                raise
            shard, damage = open_shard(path, self.shard_id, self.settings, self.boosts)
            if damage:
                logger.error("shard %d of %s: %s", self.shard_id, generation, "; ".join(map(str, damage)))
            if isinstance(shard, LocalShard) and shard.vector is not None:
                shard.vector.warm()
            opened = _Opened(listing, shard, pin)
            with self._lock:
                replaced = self._opened.get(generation)
                self._opened[generation] = opened
                self._opened.move_to_end(generation)
                evicted = [replaced] if replaced is not None else []
                while len(self._opened) > self.settings.open_generations:
                    evicted.append(self._opened.popitem(last=False)[1])
            for old in evicted:
                self.store.release(old.pin)  # its files stay readable to this process until closed
            self.store.forget()
            logger.info("shard %d: serving %s from %s", self.shard_id, listing.view, path)
            return opened

    def _read(self, generation: str, relative: str, offset: int, length: int) -> bytes:
        data: bytes = self._ray.get(
            self.source.read.remote(generation, relative, offset, length), timeout=120
        )
        return data

    def _shard(self, generation: str) -> LocalShard | FailedShard:
        opened = self._open_shard(generation)
        return opened if opened is not None else self._load(generation).shard

    def _open_shard(self, generation: str) -> LocalShard | FailedShard | None:
        with self._lock:
            opened = self._opened.get(generation)
            if opened is None:
                return None
            self._opened.move_to_end(generation)
            return opened.shard

    async def _get(self, generation: str) -> LocalShard | FailedShard:
        """The open shard at once (no thread hop: each costs the call ~0.2 ms), else loaded in a thread."""
        opened = self._open_shard(generation)
        return opened if opened is not None else await asyncio.to_thread(self._shard, generation)

    # -- what the broker calls (each pinned to a generation) -----------------------------

    async def ready(self, generation: str) -> dict[str, Any]:
        """Load ``generation`` here if it is not yet; its size and vector model."""
        shard = await self._get(generation)
        if isinstance(shard, FailedShard):
            raise ShardUnavailable(f"Shard {self.shard_id} is not served: {shard.failed}")
        return {"num_docs": shard.num_docs, "vector_model": shard.vector_model}

    async def doc_freqs(self, generation: str, query: Query) -> dict[tuple[str, str], int]:
        shard = await self._get(generation)
        return await asyncio.to_thread(shard.doc_freqs, query)

    async def candidates(self, generation: str, request: ShardRequest) -> ShardReply:
        shard = await self._get(generation)
        return await asyncio.to_thread(shard.candidates, request)

    async def annotate(self, generation: str, request: AnnotateRequest) -> Annotations:
        shard = await self._get(generation)
        return await asyncio.to_thread(shard.annotate, request)

    async def fetch(self, generation: str, doc_ids: Sequence[DocId]) -> dict[DocId, StoredDoc]:
        shard = await self._get(generation)
        return await asyncio.to_thread(shard.fetch, doc_ids)

    def check_health(self) -> None:
        """Ray Serve's health check: a replica whose follower died is restarted."""
        if not self._follower.is_alive():
            raise RuntimeError(f"shard {self.shard_id}: the generation follower stopped")

    def __del__(self) -> None:
        self._stop.set()
