"""One shard as its own process (``trawl shard serve``) and the broker's HTTP client for it.

The protocol is five small JSON calls mirroring :class:`retrieval.query.shard_backend.ShardBackend`:
``GET /shard/info``, ``POST /shard/doc_freqs``, ``POST /shard/candidates``,
``POST /shard/annotate`` (a learned ranker's fields for the candidates kept) and
``POST /shard/fetch``. Document ids travel as strings (they exceed 2^53). The shard
process serves the published generation of its index root and follows ``CURRENT``
and the generation's in-place updates (its update stamp, as ``GenerationSet`` does),
so a shard process answers from an update batch at the first request after it.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from numpy.typing import NDArray
from pydantic import BaseModel

from core.errors import ManifestError, ShardUnavailable
from core.settings import SearchSettings
from core.types import DocId, Query, Section
from retrieval.index import layout
from retrieval.index.collection_stats import CorpusStats
from retrieval.index.forward_features import ShardFeatures
from retrieval.index.generation import open_shard, read_update_stamp
from retrieval.index.lexical import StoredDoc
from retrieval.index.lexical_query import FieldBoosts
from retrieval.index.manifest import IndexManifest, read_pointer
from retrieval.index.root import IndexRoot, resolve_index
from retrieval.query.hybrid import Candidate, CandidateFields
from retrieval.query.shard_backend import (
    AnnotateRequest,
    Annotations,
    FailedShard,
    LocalShard,
    ShardReply,
    ShardRequest,
)

logger = logging.getLogger(__name__)


# -- wire format ------------------------------------------------------------------------


def query_to_wire(query: Query) -> dict[str, Any]:
    return dataclasses.asdict(query)


def query_from_wire(data: dict[str, Any]) -> Query:
    return Query(
        raw=str(data.get("raw", "")),
        terms=tuple(data.get("terms", ())),
        phrases=tuple(data.get("phrases", ())),
        excluded=tuple(data.get("excluded", ())),
        site=data.get("site"),
        lang=data.get("lang"),
        filetype=data.get("filetype"),
        expansions=tuple((str(text), float(share)) for text, share in data.get("expansions", ())),
        read_as=str(data.get("read_as", "")),
    )


def _b64_f4(values: NDArray[np.float32]) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype="<f4").tobytes()).decode("ascii")


def _f4_from_b64(text: str) -> NDArray[np.float32]:
    """:func:`_b64_f4`'s inverse: the same bits, as native float32."""
    return np.frombuffer(base64.b64decode(text), dtype="<f4").astype(np.float32)


def vectors_to_wire(vectors: dict[DocId, NDArray[np.float32]]) -> dict[str, Any]:
    """Document vectors as ids plus one base64 block of little-endian float32 rows (exact bits)."""
    ids = list(vectors)
    rows = np.stack([vectors[d] for d in ids]) if ids else np.zeros((0, 0), dtype=np.float32)
    return {
        "doc_ids": [str(int(d)) for d in ids],
        "dim": int(rows.shape[1]) if ids else 0,
        "data": _b64_f4(rows),
    }


def vectors_from_wire(data: dict[str, Any] | None) -> dict[DocId, NDArray[np.float32]]:
    if not data or not data.get("doc_ids"):
        return {}
    ids = [DocId(int(d)) for d in data["doc_ids"]]
    rows = _f4_from_b64(data["data"]).reshape(len(ids), int(data["dim"]))
    return {d: rows[i] for i, d in enumerate(ids)}


def candidate_to_wire(c: Candidate) -> dict[str, Any]:
    return {
        "doc_id": str(int(c.doc_id)),
        "shard_id": c.shard_id,
        "bm25": c.bm25,
        "cosine": c.cosine,
        "lexical_rank": c.lexical_rank,
        "vector_rank": c.vector_rank,
        "field_bm25": [list(p) for p in c.field_bm25],
        "lexical_match": c.lexical_match,
        "doc_vector": _b64_f4(c.doc_vector) if c.doc_vector is not None else None,
    }


def candidate_from_wire(d: dict[str, Any]) -> Candidate:
    return Candidate(
        doc_id=DocId(int(d["doc_id"])),
        shard_id=int(d["shard_id"]),
        bm25=d["bm25"],
        cosine=d["cosine"],
        lexical_rank=d["lexical_rank"],
        vector_rank=d["vector_rank"],
        field_bm25=tuple((str(f), float(s)) for f, s in d["field_bm25"]),
        lexical_match=bool(d.get("lexical_match", d["bm25"] is not None)),
        doc_vector=_f4_from_b64(d["doc_vector"]) if d.get("doc_vector") else None,
    )


class DocFreqsBody(BaseModel):
    query: dict[str, Any]
    generation: str | None = None


class CandidatesBody(BaseModel):
    query: dict[str, Any]
    generation: str | None = None
    vector: list[float] | None = None
    k_lexical: int
    k_vector: int
    stats_num_docs: int | None = None
    stats_df: list[tuple[str, str, int]] = []
    with_fields: bool = False
    with_doc_vectors: bool = False


class AnnotateBody(BaseModel):
    query: dict[str, Any]
    generation: str | None = None
    vector: list[float] | None = None
    stats_num_docs: int | None = None
    stats_df: list[tuple[str, str, int]] = []
    doc_ids: list[str]
    needs_cosine: list[str] = []
    with_doc_vectors: bool = False


def _stats_to_wire(stats: CorpusStats | None, body: dict[str, Any]) -> None:
    if stats is not None:
        body["stats_num_docs"] = stats.num_docs
        body["stats_df"] = [[f, t, n] for (f, t), n in stats.doc_freq.items()]


def _stats_from_wire(num_docs: int | None, df: list[tuple[str, str, int]]) -> CorpusStats | None:
    return CorpusStats(num_docs, {(f, t): n for f, t, n in df}) if num_docs is not None else None


class FetchBody(BaseModel):
    doc_ids: list[str]
    generation: str | None = None


# -- the shard process --------------------------------------------------------------------


class GenerationGone(ShardUnavailable):
    """A broker asked for a generation this shard process no longer has (HTTP 409)."""


class _ShardHolder:
    """The shard of the published generation, reopened when ``CURRENT`` or its update stamp
    changes, and the shard of the few generations before it that a broker still asks for.

    A broker pins every call to the generation its answer is for (a cursor made on the
    previous generation keeps paging through it after a publish): the shard serves that
    generation while it is on disk, keeping at most ``open_generations`` older ones open.
    """

    def __init__(self, index: Path, shard: int, settings: SearchSettings) -> None:
        self.index = Path(index)
        self.shard = shard
        self.settings = settings
        self._lock = threading.Lock()
        self._pointer: str | None = None
        self._path = self.index
        self._stamp: tuple[int, int] | None = None
        self._older: OrderedDict[str, LocalShard | FailedShard] = OrderedDict()
        self.damage: dict[str, list[str]] = {}
        """Per open generation, its damaged files this shard does not serve (``/healthz``)."""
        self.generation = ""
        self.local = self._open()

    def _open_at(self, path: Path) -> tuple[IndexManifest, LocalShard | FailedShard]:
        manifest = IndexManifest.load(path)
        if self.shard >= manifest.shards:
            raise ShardUnavailable(
                f"Generation {manifest.generation} has {manifest.shards} shards; no shard {self.shard}."
            )
        # A damaged file is never fatal: the shard answers 503 (lexical) or serves lexical only.
        local, damage = open_shard(path, self.shard, self.settings, FieldBoosts.from_settings(self.settings))
        self.damage[manifest.generation] = [str(d) for d in damage]
        if isinstance(local, LocalShard) and local.vector is not None:
            local.vector.warm()  # seconds on a large shard: not in the first query's time
        return manifest, local

    def _open(self) -> LocalShard | FailedShard:
        path = resolve_index(self.index)
        # Read before opening: an update committed while the shard opens is seen next time.
        stamp = read_update_stamp(path)
        pointer = read_pointer(layout.current_pointer(self.index))
        manifest, local = self._open_at(path)
        if self.generation and self.generation != manifest.generation:
            self._keep_older(self.generation, self.local)
        self.generation = manifest.generation
        self._pointer = pointer
        self._path, self._stamp = path, stamp
        return local

    def _keep_older(self, generation: str, local: LocalShard | FailedShard) -> None:
        self._older[generation] = local
        self._older.move_to_end(generation)
        while len(self._older) > max(self.settings.open_generations - 1, 0):
            self._older.popitem(last=False)

    def _stale(self) -> bool:
        return (
            read_pointer(layout.current_pointer(self.index)) != self._pointer
            or read_update_stamp(self._path) != self._stamp
        )

    def get(self, generation: str | None = None) -> LocalShard | FailedShard:
        """The shard of ``generation`` (None: the published one); a
        :class:`GenerationGone` when this shard can no longer serve it."""
        if self._stale():
            with self._lock:
                if self._stale():
                    self.local = self._open()
        if generation is None or generation == self.generation:
            return self.local
        with self._lock:
            older = self._older.get(generation)
            if older is not None:
                return older
            if layout.is_index(self.index):
                raise GenerationGone(f"Shard {self.shard} serves generation {self.generation} only.")
            try:
                _, older = self._open_at(IndexRoot(self.index).path_of(generation))
            except (ManifestError, OSError, ValueError) as exc:
                raise GenerationGone(
                    f"Shard {self.shard} cannot serve generation {generation}: {exc}"
                ) from exc
            self._keep_older(generation, older)
            return older


class FaultBody(BaseModel):
    delay_ms: float


def create_shard_app(
    index: Path, shard: int, settings: SearchSettings, *, delay_s: float = 0.0, allow_faults: bool = False
) -> FastAPI:
    """The app of one shard process.

    Endpoints that touch the shard are plain ``def`` (FastAPI runs them in its thread
    pool): Tantivy and hnswlib calls block, and on the event loop one slow query would
    stall every other request of the process (docs/DECISIONS.md, 8).

    ``delay_s`` slows every answer; with ``allow_faults`` the delay can be changed at run
    time through ``POST /shard/fault`` (fault drills and tests; off in production).
    """
    holder = _ShardHolder(index, shard, settings)
    app = FastAPI(title=f"Trawl shard {shard}", version="0.1.0")

    @app.exception_handler(GenerationGone)
    async def generation_gone(_request: Request, exc: GenerationGone) -> JSONResponse:
        return JSONResponse({"error": "generation_gone", "detail": str(exc)}, status_code=409)

    @app.exception_handler(ShardUnavailable)
    async def unavailable(_request: Request, exc: ShardUnavailable) -> JSONResponse:
        return JSONResponse({"error": "shard_unavailable", "detail": str(exc)}, status_code=503)

    fault = {"delay_s": delay_s}

    def _delay() -> None:
        if fault["delay_s"] > 0:
            time.sleep(fault["delay_s"])

    if allow_faults:

        @app.post("/shard/fault")
        async def set_fault(body: FaultBody) -> dict[str, float]:
            fault["delay_s"] = max(0.0, body.delay_ms / 1000)
            return {"delay_ms": fault["delay_s"] * 1000}

    @app.get("/shard/info")
    def info() -> dict[str, Any]:
        local = holder.get()
        return {
            "shard_id": shard,
            "num_docs": local.num_docs,
            "vector_model": local.vector_model,
            "generation": holder.generation,
        }

    @app.post("/shard/doc_freqs")
    def doc_freqs(body: DocFreqsBody) -> dict[str, Any]:
        _delay()
        local = holder.get(body.generation)
        freqs = local.doc_freqs(query_from_wire(body.query))
        return {"df": [[f, t, n] for (f, t), n in freqs.items()], "num_docs": local.num_docs}

    @app.post("/shard/candidates")
    def candidates(body: CandidatesBody) -> dict[str, Any]:
        _delay()
        stats = _stats_from_wire(body.stats_num_docs, body.stats_df)
        request = ShardRequest(
            query=query_from_wire(body.query),
            vector=np.asarray(body.vector, dtype=np.float32) if body.vector is not None else None,
            k_lexical=body.k_lexical,
            k_vector=body.k_vector,
            stats=stats,
            with_fields=body.with_fields,
            with_doc_vectors=body.with_doc_vectors,
        )
        local = holder.get(body.generation)
        reply = local.candidates(request)
        return {
            "num_docs": local.num_docs,
            "shard_id": reply.shard_id,
            "candidates": [candidate_to_wire(c) for c in reply.candidates],
            "lexical_total": reply.lexical_total,
            "has_vectors": reply.has_vectors,
            "generation": body.generation or holder.generation,
            "features": reply.features.to_wire() if reply.features is not None else None,
        }

    @app.post("/shard/annotate")
    def annotate(body: AnnotateBody) -> dict[str, Any]:
        _delay()
        request = AnnotateRequest(
            query=query_from_wire(body.query),
            vector=np.asarray(body.vector, dtype=np.float32) if body.vector is not None else None,
            stats=_stats_from_wire(body.stats_num_docs, body.stats_df),
            doc_ids=tuple(DocId(int(d)) for d in body.doc_ids),
            needs_cosine=tuple(DocId(int(d)) for d in body.needs_cosine),
            with_doc_vectors=body.with_doc_vectors,
        )
        local = holder.get(body.generation)
        got = local.annotate(request)
        return {
            "num_docs": local.num_docs,
            "field_bm25": [
                [str(int(d)), [list(p) for p in pairs]] for d, pairs in got.fields.field_bm25.items()
            ],
            "cosine": [[str(int(d)), c] for d, c in got.fields.cosine.items()],
            "doc_vectors": vectors_to_wire(got.fields.doc_vectors),
            "features": got.features.to_wire() if got.features is not None else None,
        }

    @app.post("/shard/fetch")
    def fetch(body: FetchBody) -> dict[str, Any]:
        docs = holder.get(body.generation).fetch([DocId(int(d)) for d in body.doc_ids])
        return {"docs": [dataclasses.asdict(d) | {"doc_id": str(int(d.doc_id))} for d in docs.values()]}

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        problems = list(holder.damage.get(holder.generation, []))
        failed = getattr(holder.local, "failed", None)
        if failed and not problems:
            problems.append(failed)
        return {
            "status": "degraded" if problems else "ok",
            "generation": holder.generation,
            "problems": problems,
        }

    return app


# -- the broker's client ------------------------------------------------------------------


class HttpShard:
    """A remote shard replica. Its methods raise on any failure; the broker turns that into
    a missing shard."""

    def __init__(self, base_url: str, *, timeout_s: float = 5.0, client: httpx.Client | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = client or httpx.Client(base_url=self.base_url, timeout=timeout_s)
        info = self._get("/shard/info")
        self.shard_id = int(info["shard_id"])
        self._num_docs = int(info["num_docs"])
        self._vector_model: str | None = info.get("vector_model")
        self.generation: str | None = None
        """The generation every call asks for (None: whatever the shard serves)."""

    def pinned(self, generation: str) -> HttpShard:
        """This replica's client, asking for ``generation`` in every call (same connection
        pool): the broker of one opened generation must not get answers from the next."""
        twin = copy.copy(self)
        twin.generation = generation
        return twin

    def _get(self, path: str) -> dict[str, Any]:
        response = self._client.get(path)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def _post(self, path: str, body: dict[str, Any], timeout_s: float | None) -> dict[str, Any]:
        # A plain number, or nothing for the client's default: an ``httpx.Timeout`` (or httpx's
        # default sentinel) is refused by a client from httpx2, which Starlette's TestClient
        # became in 1.10, and a number means the same to both.
        if self.generation is not None:
            body = {**body, "generation": self.generation}
        if timeout_s is None:
            response = self._client.post(path, json=body)
        else:
            response = self._client.post(path, json=body, timeout=timeout_s)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        answered = data.get("generation")
        if self.generation is not None and answered is not None and answered != self.generation:
            raise ShardUnavailable(
                f"Shard {self.base_url} answered for generation {answered}, not {self.generation}."
            )
        if "num_docs" in data:
            self._num_docs = int(data["num_docs"])
        return data

    @property
    def num_docs(self) -> int:
        """As of the shard's last answer: in-place updates change it while the client stays
        connected, and asking here would block on a hung shard."""
        return self._num_docs

    @property
    def vector_model(self) -> str | None:
        return self._vector_model

    def doc_freqs(self, query: Query, *, timeout_s: float | None = None) -> dict[tuple[str, str], int]:
        data = self._post("/shard/doc_freqs", {"query": query_to_wire(query)}, timeout_s)
        return {(f, t): int(n) for f, t, n in data["df"]}

    def candidates(self, request: ShardRequest, *, timeout_s: float | None = None) -> ShardReply:
        body: dict[str, Any] = {
            "query": query_to_wire(request.query),
            "vector": request.vector.tolist() if request.vector is not None else None,
            "k_lexical": request.k_lexical,
            "k_vector": request.k_vector,
            "with_fields": request.with_fields,
            "with_doc_vectors": request.with_doc_vectors,
        }
        _stats_to_wire(request.stats, body)
        data = self._post("/shard/candidates", body, timeout_s)
        return ShardReply(
            int(data["shard_id"]),
            tuple(candidate_from_wire(c) for c in data["candidates"]),
            int(data["lexical_total"]),
            bool(data["has_vectors"]),
            ShardFeatures.from_wire(data["features"]) if data.get("features") else None,
        )

    def annotate(self, request: AnnotateRequest, *, timeout_s: float | None = None) -> Annotations:
        body: dict[str, Any] = {
            "query": query_to_wire(request.query),
            "vector": request.vector.tolist() if request.vector is not None else None,
            "doc_ids": [str(int(d)) for d in request.doc_ids],
            "needs_cosine": [str(int(d)) for d in request.needs_cosine],
            "with_doc_vectors": request.with_doc_vectors,
        }
        _stats_to_wire(request.stats, body)
        data = self._post("/shard/annotate", body, timeout_s)
        fields = CandidateFields(
            field_bm25={
                DocId(int(d)): tuple((str(f), float(v)) for f, v in pairs) for d, pairs in data["field_bm25"]
            },
            cosine={DocId(int(d)): float(c) for d, c in data["cosine"]},
            doc_vectors=vectors_from_wire(data.get("doc_vectors")),
        )
        return Annotations(
            fields=fields,
            features=ShardFeatures.from_wire(data["features"]) if data.get("features") else None,
        )

    def fetch(self, doc_ids: Sequence[DocId], *, timeout_s: float | None = None) -> dict[DocId, StoredDoc]:
        data = self._post("/shard/fetch", {"doc_ids": [str(int(d)) for d in doc_ids]}, timeout_s)
        out: dict[DocId, StoredDoc] = {}
        for d in data["docs"]:
            sections = tuple(Section(**s) for s in d.get("sections", ()))
            doc = StoredDoc(
                **{
                    **d,
                    "doc_id": DocId(int(d["doc_id"])),
                    "headings": tuple(d["headings"]),
                    "sections": sections,
                    "quality_reasons": tuple(d.get("quality_reasons", ())),
                }
            )
            out[doc.doc_id] = doc
        return out

    def close(self) -> None:
        self._client.close()


def parse_shard_urls(spec: str) -> list[list[str]]:
    """``http://a:1|http://a2:1,http://b:2`` → ``[[a, a2], [b]]``: shards by comma, replicas by ``|``."""
    shards = [[u.strip() for u in part.split("|") if u.strip()] for part in spec.split(",") if part.strip()]
    if not shards:
        raise ShardUnavailable(
            f"No shard addresses in {spec!r}; write them like http://127.0.0.1:9001,http://127.0.0.1:9002."
        )
    return shards


def connect_shards(spec: str, *, timeout_s: float = 5.0) -> list[list[HttpShard]]:
    """Clients for every replica, ordered by the shard id each reports."""
    clients = [
        [HttpShard(url, timeout_s=timeout_s) for url in replicas] for replicas in parse_shard_urls(spec)
    ]
    clients.sort(key=lambda replicas: replicas[0].shard_id)
    return clients
