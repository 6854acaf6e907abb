"""Rankers the evaluation harness can run, by name.

A ranker answers a batch of parsed queries with up to ``k`` scored documents each.
It gets an :class:`EvalContext` (the dataset, its cached index, the qrels and the
query folds) so that rankers which learn something (a fusion weight, an LTR model)
can fit on training folds and score only held-out queries. Later issues register
more rankers with :func:`register_ranker`.
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
        from retrieval.build import shard_dir

        return LexicalShard(shard_dir(self.index_dir, 0) / "lexical")


class EvalRanker(Protocol):
    name: str

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]: ...


RankerFactory = Callable[[EvalContext], EvalRanker]
_REGISTRY: dict[str, RankerFactory] = {}


def register_ranker(name: str) -> Callable[[RankerFactory], RankerFactory]:
    def wrap(factory: RankerFactory) -> RankerFactory:
        _REGISTRY[name] = factory
        return factory

    return wrap


def ranker_names() -> list[str]:
    _load_plugins()
    return sorted(_REGISTRY)


def make_ranker(name: str, context: EvalContext) -> EvalRanker:
    _load_plugins()
    if name not in _REGISTRY:
        raise ConfigError(f"Unknown ranker {name!r}; expected one of: {', '.join(sorted(_REGISTRY))}.")
    return _REGISTRY[name](context)


def _load_plugins() -> None:
    """Import the modules that register rankers (each is optional until its issue lands)."""
    import importlib

    for module in ("training.rankers_dense", "training.rankers_ltr", "training.rankers_ce"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


class Bm25Ranker:
    """Tantivy BM25 with Trawl's analysis and field boosts."""

    name = "bm25"

    def __init__(self, shard: LexicalShard) -> None:
        self.shard = shard

    def run(self, queries: Mapping[str, Query], k: int) -> dict[str, list[ScoredDoc]]:
        return {qid: list(self.shard.search(q, k=k).hits) for qid, q in queries.items()}


@register_ranker("bm25")
def _bm25(context: EvalContext) -> EvalRanker:
    return Bm25Ranker(context.lexical())
