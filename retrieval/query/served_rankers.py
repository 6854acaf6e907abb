"""The rankers a service serves: stages by name, the query encoder, and the default.

A generation serves the stages it has what for: one that needs vectors only when the
query encoder matches the generation's vector model. The default (``"auto"``) is the
first of :data:`AUTO_RANKERS` a generation serves (DECISIONS 30).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from numpy.typing import NDArray

from core.errors import BadParameter
from core.settings import SearchSettings
from core.types import Query
from retrieval.index.generation import Generation
from retrieval.query.ranking import Bm25Stage, ConvexStage, DenseStage, ExpandedStage, RankStage, RrfStage
from retrieval.query.rm3 import Rm3

QueryEncoder = Callable[[str], NDArray[np.float32]]

AUTO_RANKERS: tuple[str, ...] = ("ltr", "hybrid", "bm25")
"""The default ranker (``search.default_ranker = "auto"``): the first the generation can serve.

``ltr`` exists only where a model is loaded and needs vectors, so a fresh checkout
without a model serves ``hybrid`` and an index without vectors ``bm25``. Chosen by
measurement through the served path (figures in :data:`AUTO_REASONS`, ``rankers.toml``
and the README), on nDCG@10, the metric the targets are stated in."""

AUTO_REASONS: Mapping[str, str] = {
    "ltr": (
        "LTR trained on the mix (cranfield, cisi and three crawled documentation sites: pydocs, "
        "pgdocs, sqlitedocs; collections weighted alike) has the best held-out nDCG@10: above bm25 "
        "on a site left out of training "
        "(nDCG@10 pgdocs .9360 vs .9189, sqlitedocs .8721 vs .8052) and hybrid held out on "
        "cranfield .4531 (hybrid .4193, p=.0002) and cisi .4448 (.4424, p=.88); MRR@10, reported "
        "beside it, is lower on cisi (.6309 vs .6729)"
    ),
    "hybrid": (
        "no LTR model is loaded (models/ltr/default or rank.ltr_model): convex fusion is the best "
        "model-free ranker held out on cranfield, cisi and pydocs"
    ),
    "bm25": "this generation has no vectors the query encoder matches (run `trawl embed`)",
}
"""Why each of :data:`AUTO_RANKERS` is the default when it is the first one available
(``/healthz`` serves it)."""


class ServedRankers:
    """The stages a service offers by name, and the encoder its vector stages need.

    ``encoder`` and ``encoder_model`` may be replaced while serving (a newly published
    generation with another vector model gets its encoder, :mod:`rerank.pipeline`).
    """

    def __init__(
        self,
        settings: SearchSettings,
        *,
        encoder: QueryEncoder | None = None,
        encoder_model: str | None = None,
        stages: Mapping[str, RankStage] | None = None,
    ) -> None:
        self.settings = settings
        self.encoder = encoder
        self.encoder_model = encoder_model
        self.stages: dict[str, RankStage] = {
            "bm25": Bm25Stage(),
            "dense": DenseStage(),
            "hybrid-rrf": RrfStage(settings.rrf_k),
            "hybrid": ConvexStage(settings.hybrid_weight),
            "bm25-rm3": ExpandedStage(Bm25Stage(), Rm3()),
            "hybrid-rm3": ExpandedStage(ConvexStage(settings.hybrid_weight), Rm3()),
        }
        self.stages.update(stages or {})

    def can_use_vectors(self, generation: Generation) -> bool:
        return (
            self.encoder is not None
            and generation.vector_model is not None
            and (self.encoder_model is None or self.encoder_model == generation.vector_model)
        )

    def names(self, generation: Generation) -> list[str]:
        vectors = self.can_use_vectors(generation)
        return sorted(n for n, s in self.stages.items() if vectors or not s.needs_vector)

    def default(self, generation: Generation) -> str:
        if self.settings.default_ranker != "auto":
            return self.settings.default_ranker
        available = self.names(generation)
        return next(name for name in AUTO_RANKERS if name in available)

    def default_reason(self, generation: Generation) -> str:
        """Why :meth:`default` is what it is, for ``/healthz`` and operators."""
        name = self.default(generation)
        if self.settings.default_ranker != "auto":
            return f"configured: search.default_ranker = {name!r}"
        return f"auto (first of {', '.join(AUTO_RANKERS)} this index serves): {AUTO_REASONS[name]}"

    def stage(self, name: str | None, generation: Generation) -> RankStage:
        """The stage named (None: the default); a 400 naming what the generation serves instead."""
        name = name or self.default(generation)
        available = self.names(generation)
        if name not in available:
            if name in self.stages:
                raise BadParameter(
                    f"Ranker {name!r} needs vectors, which generation {generation.id} does not have "
                    f"(run `trawl embed`); available: {', '.join(available)}."
                )
            raise BadParameter(f"Unknown ranker {name!r}; expected one of: {', '.join(available)}.")
        return self.stages[name]

    def query_vector(
        self, query: Query, stage: RankStage, generation: Generation
    ) -> NDArray[np.float32] | None:
        """The query's vector, when the stage reads one and the generation's vectors match."""
        if not stage.needs_vector or self.encoder is None or not self.can_use_vectors(generation):
            return None
        text = query.positive_text
        return self.encoder(text) if text.strip() else None
