"""What the service serves now (generation, default ranker, vectors, backfill), for the
health routes and the home page."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from fastapi import Request

from api.schemas import BackfillModel, HealthModel
from retrieval.query.service import SearchService
from retrieval.vectors.backfill_progress import read_progress


def backfill_status(request: Request) -> BackfillModel | None:
    """The progress file of the index root's embeddings backfill, when one ran."""
    progress = read_progress(Path(request.app.state.index_dir))
    if progress is None:
        return None
    raw: dict[str, Any] = asdict(progress)
    return BackfillModel(
        **{k: v for k, v in raw.items() if k in BackfillModel.model_fields}, percent=progress.percent
    )


def live_status(request: Request, service: SearchService) -> dict[str, Any]:
    """What the home page shows: the serving generation, its default ranker, the backfill."""
    generation = service.generation
    return {
        "generation": generation.id,
        "ranker": service.default_ranker(generation),
        "vectors": service.can_use_vectors(generation),
        "backfill": backfill_status(request),
    }


def health(request: Request, service: SearchService, status: str) -> HealthModel:
    """The body of ``/healthz`` and ``/readyz``; ``ok`` becomes ``degraded`` while a shard (or
    its vectors) is out of service for a damaged file, or a published generation failed to open."""
    problems = service.problems()
    return HealthModel(
        status="degraded" if problems and status == "ok" else status,
        problems=problems,
        documents=service.num_docs,
        generation=service.generation.id,
        rankers=service.ranker_names(),
        ranker=service.default_ranker(service.generation),
        ranker_reason=service.default_reason(service.generation),
        backfill=backfill_status(request),
    )
