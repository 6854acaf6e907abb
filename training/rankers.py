"""Rankers the evaluation harness can run, by name.

Trawl's own rankers are :data:`SERVED_RANKERS`: the harness ranks them through the
served search path (:mod:`training.evaluate`), never through a copy here.
:func:`register_ranker` adds others (experiment baselines, test doubles) under new
names; such a runner answers a batch of parsed queries with up to ``k`` scored
documents each, given an :class:`EvalContext` (the dataset, its cached index, the qrels).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from core.errors import ConfigError
from core.settings import Settings
from core.types import Query, ScoredDoc
from retrieval.index.layout import lexical_dir
from retrieval.index.lexical import LexicalShard
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


SERVED_RANKERS: tuple[str, ...] = (
    "bm25",
    "bm25-rm3",
    "dense",
    "hybrid-rrf",
    "hybrid",
    "hybrid-rm3",
    "ltr",
    "ltr+ce",
)
"""Stage names of :class:`retrieval.query.service.SearchService` (and ``rerank.pipeline``)."""
VECTOR_RANKERS: frozenset[str] = frozenset(SERVED_RANKERS) - {"bm25", "bm25-rm3"}


def ranker_names() -> list[str]:
    return sorted({*SERVED_RANKERS, *_REGISTERED})


def make_ranker(name: str, context: EvalContext) -> EvalRanker:
    """The runner of a registered (not served) ranker."""
    if name not in _REGISTERED:
        raise ConfigError(f"Unknown ranker {name!r}; expected one of: {', '.join(ranker_names())}.")
    return _REGISTERED[name](context)


class Bm25Ranker:
    """Shard-level BM25: a building block for experiment baselines (``bm25-notitle``).

    Trawl's own ``bm25`` is served; this is for baselines that change one thing of it.
    """

    name = "bm25"

    def __init__(self, shard: LexicalShard) -> None:
        self.shard = shard

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]:
        return {qid: list(self.shard.search(q, k=k).hits) for qid, q in queries.items()}
