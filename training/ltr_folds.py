"""Cross-validated LTR as served: one model directory per fold, trained without that fold.

``trawl eval --ranker ltr`` serves fold ``f``'s queries with the model trained on the other
folds (and on every query of the ``train_with`` collections, less the evaluated one),
through the normal ``ltr`` stage: nothing scores a query with a model that saw its
judgments or chose its rounds on them. Folds come from ``folds.tsv`` when the collection has
one (split by target page), else a seeded split by query.

``transfer`` is leave-one-collection-out: one model trained on the ``train_with``
collections only scores all of the evaluated one's queries, answering "what does a model
trained elsewhere do on data like this?", the question a user's own crawl asks of the
packaged model. Fold models are cached under the collection's evaluation cache, keyed by
the training frames, the folds and the parameters.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from core.errors import ConfigError
from core.settings import Settings
from rerank.features import SCHEMA
from rerank.ltr import MODEL_FILE, LtrModel, model_id_of
from training.crawl_sets import require_collections
from training.datasets import BeirDataset
from training.eval_index import cached_index
from training.frames import beir_labels, collection_frame
from training.train_ltr import LtrParams, collection_prefix, fit, query_folds

logger = logging.getLogger(__name__)


@dataclass
class FoldModels:
    """Fold → served model directory, and which fold each query is tested in."""

    assignment: dict[str, int]
    models: dict[int, Path] = field(default_factory=dict)
    rounds: dict[int, int] = field(default_factory=dict)
    folds_from: str = "seeded split by query"
    train_with: tuple[str, ...] = ()
    transfer: bool = False
    """Leave-one-collection-out: one model, trained on ``train_with`` only, for every query."""

    def test_queries(self, fold: int) -> list[str]:
        return [q for q, f in self.assignment.items() if f == fold]

    def report(self) -> dict[str, Any]:
        return {
            "cv": {
                "folds": len(self.models),
                "folds_from": self.folds_from,
                "train_with": list(self.train_with),
                "transfer": self.transfer,
                "fold_rounds": [self.rounds[f] for f in sorted(self.rounds)],
                "fold_models": [str(self.models[f]) for f in sorted(self.models)],
            }
        }


def fold_assignment(
    dataset: BeirDataset, qids: Sequence[str], folds: int, *, seed: int = 0
) -> tuple[dict[str, int], str]:
    fixed = dataset.folds()
    if fixed:
        return {q: fixed[q] for q in qids if q in fixed}, "folds.tsv (by target page)"
    return query_folds(qids, folds, seed=seed), f"seeded split by query ({folds} folds, seed {seed})"


def fold_models(
    dataset: BeirDataset,
    settings: Settings,
    *,
    folds: int = 5,
    train_with: Sequence[Path] = (),
    params: LtrParams | None = None,
    seed: int = 0,
    transfer: bool = False,
) -> FoldModels:
    """Train (or reuse) one model per fold of ``dataset``; see the module doc.

    With ``transfer``, a single "fold" 0 holds every query and its model learns from the
    ``train_with`` collections only.
    """
    params = params or dataclasses.replace(LtrParams(), seed=seed)
    require_collections(train_with, wanted_by=f"LTR held out on {dataset.name}, trained with them,")
    # The evaluated collection among the mix would put its test fold into training.
    train_with = [r for r in train_with if Path(r).resolve() != dataset.root.resolve()]
    if transfer and not train_with:
        raise ConfigError(
            "transfer (leave-one-collection-out) needs at least one --train-with collection "
            f"other than {dataset.name}."
        )
    own = collection_frame(dataset.root, settings)
    prefix = collection_prefix(dataset)
    frames = [own.frame.with_columns((pl.lit(prefix) + pl.col("qid")).alias("qid"))]
    labels = beir_labels(dataset, dataset.qrels())
    if transfer:
        assignment = dict.fromkeys(labels, 0)
        folds_from = "none: every query held out (trained on the other collections only)"
    else:
        assignment, folds_from = fold_assignment(dataset, list(labels), folds, seed=seed)
    teaches = {prefix + q for q, graded in labels.items() if any(graded.values())}
    others: list[str] = []
    keys = [str(own.path)]
    for root in train_with:
        other = BeirDataset.open(root)
        built = collection_frame(root, settings)
        p = collection_prefix(other)
        frames.append(built.frame.with_columns((pl.lit(p) + pl.col("qid")).alias("qid")))
        others += [p + q for q, graded in beir_labels(other, other.qrels()).items() if any(graded.values())]
        keys.append(str(built.path))
    frame = pl.concat(frames, how="vertical")
    present = set(frame["qid"].unique().to_list())
    usable = teaches & present
    key = hashlib.blake2b(
        "|".join([*keys, folds_from, repr(sorted(assignment.items())), repr(params)]).encode(), digest_size=8
    ).hexdigest()
    _, cache_dir = cached_index(dataset, settings)
    out = FoldModels(
        assignment, folds_from=folds_from, train_with=tuple(str(p) for p in train_with), transfer=transfer
    )
    for fold in sorted(set(assignment.values())):
        directory = cache_dir / f"ltr-cv-{key}" / f"fold-{fold}"
        if not (directory / MODEL_FILE).exists():
            own_train = [prefix + q for q, f in assignment.items() if f != fold and prefix + q in usable]
            train = ([] if transfer else own_train) + [q for q in others if q in present]
            model = fit(frame, train, params, seed=seed)
            name = f"{dataset.name}-fold{fold}"
            card = {
                "name": name,
                "model_id": model_id_of(model.boosters, name),
                "num_boost_round": model.rounds,
                "trained_on": (
                    f"all of {', '.join(Path(p).name for p in train_with)} (none of {dataset.name})"
                    if transfer
                    else f"{dataset.name} folds other than {fold} ({folds_from})"
                    + (f" + all of {', '.join(Path(p).name for p in train_with)}" if train_with else "")
                ),
                "queries": len(train),
            }
            LtrModel(boosters=model.boosters, features=SCHEMA, card=card).save(directory)
            logger.info(
                "fold %d of %s: %d rounds on %d queries", fold, dataset.name, model.rounds, len(train)
            )
        out.models[fold] = directory
        out.rounds[fold] = int(LtrModel.load(directory).card.get("num_boost_round", 0))
    return out
