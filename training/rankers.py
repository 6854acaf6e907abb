"""Rankers the evaluation harness can run, by name.

A ranker answers a batch of parsed queries with up to ``k`` scored documents each.
It gets an :class:`EvalContext` (the dataset, its cached index, the qrels and the
query folds) so that rankers which learn something (a fusion weight, an LTR model)
can fit on training folds and score only held-out queries.

Trawl's own rankers are listed in :func:`_builtin`; :func:`register_ranker` adds
others (experiment baselines, test doubles) under new names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from core.errors import ConfigError
from core.settings import Settings
from core.types import Query, ScoredDoc
from retrieval.lexical import LexicalShard
from training.datasets import BeirDataset, Qrels


@dataclass
class EvalContext:
    dataset: BeirDataset
    index_dir: Path
    """The cached index of this dataset (``manifest.json`` + ``shard-0000/``)."""
    cache_dir: Path
    """Scratch space for this dataset's derived artefacts (vectors, features)."""
    qrels: Qrels
    settings: Settings
    folds: int = 5
    options: dict[str, str] = field(default_factory=dict)

    def lexical(self) -> LexicalShard:
        from retrieval.layout import lexical_dir

        return LexicalShard(lexical_dir(self.index_dir, 0))


class EvalRanker(Protocol):
    name: str

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]: ...


RankerFactory = Callable[[EvalContext], EvalRanker]
_REGISTERED: dict[str, RankerFactory] = {}


def register_ranker(name: str) -> Callable[[RankerFactory], RankerFactory]:
    """Add a ranker beyond the built-in ones (decorator on its factory)."""

    def wrap(factory: RankerFactory) -> RankerFactory:
        _REGISTERED[name] = factory
        return factory

    return wrap


def _builtin() -> dict[str, RankerFactory]:
    """Trawl's rankers by name.

    Imported when first asked for, not at the top: each of those modules imports this
    one (``EvalContext``), and LightGBM comes with them, which importing this module
    should not cost.
    """
    from training.rankers_ce import LtrCeRanker
    from training.rankers_dense import DenseRanker, HybridConvexRanker, HybridRrfRanker
    from training.rankers_ltr import LtrRanker

    return {
        "bm25": _bm25,
        "dense": DenseRanker,
        "hybrid-rrf": HybridRrfRanker,
        "hybrid": HybridConvexRanker,
        "ltr": LtrRanker,
        "ltr+ce": LtrCeRanker,
    }


def _rankers() -> dict[str, RankerFactory]:
    return {**_builtin(), **_REGISTERED}


def ranker_names() -> list[str]:
    return sorted(_rankers())


def make_ranker(name: str, context: EvalContext) -> EvalRanker:
    rankers = _rankers()
    if name not in rankers:
        raise ConfigError(f"Unknown ranker {name!r}; expected one of: {', '.join(sorted(rankers))}.")
    return rankers[name](context)


class Bm25Ranker:
    """Tantivy BM25 with Trawl's analysis and field boosts."""

    name = "bm25"

    def __init__(self, shard: LexicalShard) -> None:
        self.shard = shard

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]:
        return {qid: list(self.shard.search(q, k=k).hits) for qid, q in queries.items()}


def _bm25(context: EvalContext) -> EvalRanker:
    return Bm25Ranker(context.lexical())
