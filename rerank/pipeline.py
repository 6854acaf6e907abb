"""The serving stages this package adds, and the one way to open a search service with them.

:func:`open_search_service` is what the API, ``trawl search`` and ``trawl eval`` open,
so an evaluation ranks through exactly the stages a user's request goes through.
The app asks for the stages at start-up; a missing model is not an error (a fresh checkout
serves BM25 and fusion), a broken one is (``ModelLoadError``): serving silently
without the ranker someone configured would hide the problem.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.settings import Settings
from rerank.cross_encoder import CrossEncoderReranker, CrossEncoderStage
from rerank.feature_log import FeatureLogger
from rerank.ltr import LtrModel, LtrStage
from rerank.model_card import CARD_FILE
from retrieval.query.ranking import RankStage
from retrieval.query.service import SearchService
from retrieval.vectors.embed import Embedder

logger = logging.getLogger(__name__)

DEFAULT_MODEL = Path("models") / "ltr" / "default"
REPO_ROOT = Path(__file__).resolve().parent.parent


def default_model_dir(bases: Sequence[Path] | None = None) -> Path | None:
    """``models/ltr/default`` under the first of ``bases`` that has one.

    Default bases: the working directory, then the checkout.
    """
    for base in bases if bases is not None else (Path.cwd(), REPO_ROOT):
        candidate = base / DEFAULT_MODEL
        if (candidate / CARD_FILE).exists():
            return candidate
    return None


def serving_stages(settings: Settings, *, bases: Sequence[Path] | None = None) -> Mapping[str, RankStage]:
    """``{"ltr": LtrStage}`` when a model is configured or packaged, else ``{}``.

    Plus ``"ltr+ce"`` (:class:`rerank.cross_encoder.CrossEncoderStage`) when
    ``rank.reranker_model`` names an existing directory: off by default.
    """
    rank = settings.rank
    model_dir = rank.ltr_model or default_model_dir(bases)
    if model_dir is None:
        logger.info("no LTR model (set TRAWL_RANK__LTR_MODEL or train models/ltr/default)")
        return {}
    model = LtrModel.load(model_dir, scorer=rank.ltr_scorer, cache_dir=rank.compiled_trees_dir)
    feature_log = (
        FeatureLogger(rank.feature_log_dir, sample_rate=rank.feature_log_rate)
        if rank.feature_log_dir is not None and rank.feature_log_rate > 0
        else None
    )
    logger.info("serving LTR model %s from %s", model.model_id, model_dir)
    ltr = LtrStage(model, feature_log=feature_log, user_lang=rank.user_lang)
    stages: dict[str, RankStage] = {"ltr": ltr}
    if rank.reranker_model is not None:
        if not Path(rank.reranker_model).exists():
            logger.warning("reranker %s does not exist: serving without ltr+ce", rank.reranker_model)
        else:
            reranker = CrossEncoderReranker.load(rank.reranker_model, device=rank.reranker_device)
            logger.info("serving cross-encoder %s from %s", reranker.model_id, rank.reranker_model)
            stages["ltr+ce"] = CrossEncoderStage(
                ltr, reranker, top_n=rank.reranker_top_n, weight=rank.reranker_weight
            )
    return stages


def open_search_service(settings: Settings, index_dir: Path, *, remote: Any = None) -> SearchService:
    """The search service over ``index_dir`` (or ``remote`` shards), with every ranker it can serve.

    The published generation, the model-backed stages (LTR, cross-encoder) whose models
    exist, and the query encoder when the generation has vectors.
    """
    service = SearchService.open(index_dir, settings.search, remote=remote, stages=serving_stages(settings))
    attach_encoder(settings, service)
    # A generation with vectors published while serving (the demo's background backfill, a
    # later `trawl embed`) gets its query encoder when the service switches to it.
    service.generations.listeners.append(lambda _generation: attach_encoder(settings, service))
    return service


def attach_encoder(settings: Settings, service: SearchService) -> None:
    """Attach the query encoder when the serving generation has vectors (a no-op when the
    attached one already made them)."""
    if not settings.api.encode_queries or not settings.search.use_vectors:
        return
    if service.generation.vector_model is None:
        return
    if service.encoder is not None and service.encoder_model == service.generation.vector_model:
        return
    # serving=True: one encoder thread (two threads fight uvicorn and BLAS on 2 cores: 10× p99).
    # for_model_id: queries are encoded by the variant (torch / ONNX int8) that made the vectors.
    vectors = service.generation.vector_model
    embedder = Embedder.from_settings(settings.embed, serving=True, for_model_id=vectors)
    service.encoder = embedder.encode_query
    service.encoder_model = embedder.model_id
    if embedder.model_id != service.generation.vector_model:
        logger.warning(
            "the index vectors were made by %s but the loaded model is %s: serving lexical only",
            service.generation.vector_model,
            embedder.model_id,
        )
