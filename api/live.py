"""What the service serves now, in one place: generation, default ranker and why, and what
the engine is doing (``state``: serving, or embedding with its percentage), for ``/healthz``,
``/readyz`` and the home page alike, so the two never tell different stories.

While a backfill runs, the reason for a lexical default says so (vectors are being made,
the learned ranker follows) instead of telling the reader to run ``trawl embed`` again. A
progress file that stopped moving is reported as stalled, not as embedding forever.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastapi import Request

from api.schemas import BackfillModel, HealthModel, NodeHealthModel, ShardHealthModel
from retrieval.query.service import SearchService
from retrieval.vectors.backfill_progress import BackfillProgress, read_progress

RUNNING = ("loading", "embedding", "publishing")
STALLED_AFTER_S = 300.0
"""A running backfill writes progress at least once per committed segment, seconds apart;
five minutes without a write means the job is gone (or stuck)."""


@dataclass(frozen=True, slots=True)
class LiveState:
    generation: str
    ranker: str
    ranker_reason: str
    vectors: bool
    state: str
    """``serving``, ``embedding, 45%``, ``loading the embedding model``, ``publishing vectors``,
    ``embedding failed: …`` or ``embedding stalled: …``."""
    backfill: BackfillModel | None


def backfill_status(request: Request) -> BackfillModel | None:
    """The progress file of the index root's embeddings backfill, when one ran."""
    progress = read_progress(Path(request.app.state.index_dir))
    return None if progress is None else _model(progress)


def _model(progress: BackfillProgress) -> BackfillModel:
    raw: dict[str, Any] = asdict(progress)
    return BackfillModel(
        **{k: v for k, v in raw.items() if k in BackfillModel.model_fields}, percent=progress.percent
    )


def _engine_state(progress: BackfillProgress | None, now: float) -> str:
    if progress is None or progress.state == "done":
        return "serving"
    if progress.state == "failed":
        return f"embedding failed: {progress.detail}" if progress.detail else "embedding failed"
    idle = now - progress.updated_at
    if progress.updated_at and idle > STALLED_AFTER_S:
        return f"embedding stalled: no progress for {idle / 60:.0f} min (is `trawl embed` still running?)"
    if progress.state == "loading":
        return "loading the embedding model"
    if progress.state == "publishing":
        return "publishing vectors"
    return f"embedding, {progress.percent:.0f}%"


def live_state(request: Request, service: SearchService) -> LiveState:
    """The one account of what is served and what the engine is doing."""
    generation = service.generation
    progress = read_progress(Path(request.app.state.index_dir))
    state = _engine_state(progress, time.time())
    ranker = service.default_ranker(generation)
    reason = service.default_reason(generation)
    vectors = service.can_use_vectors(generation)
    if not vectors and progress is not None and state.startswith(("embedding,", "loading", "publishing")):
        reason = (
            f"{ranker} until the embeddings backfill running now ({state}) publishes vectors; "
            "the learned ranker is served from then on"
        )
    return LiveState(
        generation.id, ranker, reason, vectors, state, None if progress is None else _model(progress)
    )


def backfill_detail(live: LiveState) -> str:
    """The home page's words after the state: how far, how fast, what follows."""
    b = live.backfill
    if b is None:
        return ""
    if live.state.startswith("embedding,"):
        left = f", about {max(1, round(b.eta_s / 60))} min left" if b.eta_s is not None else ""
        follows = "" if live.vectors else "; the learned ranker follows"
        return f"{b.done:,} of {b.total:,} passages, {b.rate:.0f}/s{left}{follows}"
    if b.state == "done":
        return "embeddings done" if live.vectors else "embeddings done, switching to them…"
    return ""


def health(request: Request, service: SearchService, status: str) -> HealthModel:
    """The body of ``/healthz`` and ``/readyz``; ``ok`` becomes ``degraded`` while a shard (or
    its vectors) is out of service for a damaged file, or a published generation failed to open."""
    problems = service.problems()
    live = live_state(request, service)
    cluster = getattr(request.app.state, "ray_shards", None)
    replicas, nodes = cluster.seen if cluster is not None else ({}, [])
    problems += [f"Ray node {n['node']} ({n['address']}) is lost" for n in nodes if not n["alive"]]
    return HealthModel(
        status="degraded" if problems and status == "ok" else status,
        state=live.state,
        problems=problems,
        documents=service.num_docs,
        generation=live.generation,
        rankers=service.ranker_names(),
        ranker=live.ranker,
        ranker_reason=live.ranker_reason,
        backfill=live.backfill,
        shards=[
            ShardHealthModel(
                shard=c.shard,
                answering=not c.open,
                misses=c.misses,
                probes=c.probes,
                last_error=c.last_error,
                replicas=replicas.get(c.shard) if cluster is not None else None,
            )
            for c in service.shard_circuits()
        ],
        nodes=[NodeHealthModel(**n) for n in nodes],
    )
