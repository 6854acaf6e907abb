"""LightGBM lambdarank training with k-fold cross-validation by query, and the model card.

Why by query: rows of one query are strongly correlated (same terms, same judgments), so
splitting rows would let a model see a query's judgments and then be scored on it. Every
split here partitions *query ids*; a collection that fixes its own folds (``folds.tsv``,
split by target page) keeps them in the outer split, as ``trawl eval`` splits it.

Each fold ``f`` of ``k``: fold ``f`` is the test part, fold ``f + 1`` the validation part
(early stopping), and the model trains on the other ``k - 2``, so a fold's test queries
never trained its model nor chose its number of rounds. Every query is scored once, by a
model that never saw it: the "held-out folds" run the harness reports. The deployable model
is then trained on all queries with the folds' mean best number of rounds.

The model card (``card.json``) records data, features, parameters, per-fold metrics, date
and code version (git revision, with ``+dirty`` when the tree has changes).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import logging
import random
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
import polars as pl

from core.atomic import write_with
from core.errors import ConfigError
from core.settings import Settings
from core.types import DocId
from rerank.features import SCHEMA
from rerank.ltr import LtrModel, model_id_of, predict_mean
from retrieval.query.served_rankers import AUTO_RANKERS, AUTO_REASONS
from training.datasets import BeirDataset
from training.frames import CollectionFrame, beir_labels, collection_frame
from training.ir_metrics import METRICS, evaluate_run

logger = logging.getLogger(__name__)

DEFAULT_FOLDS = 5
DEFAULT_INNER_FOLDS = 4
ProgressFn = Callable[[str, int, int], None]
"""(what, done, total)."""
FullQrels = Mapping[str, Mapping[str, int]]
"""qid → str(doc_id) → grade: every judgment, including documents not among the candidates."""


@dataclass(frozen=True, slots=True)
class LtrParams:
    """LightGBM parameters; small trees and strong regularisation suit a few hundred queries."""

    learning_rate: float = 0.03
    num_leaves: int = 15
    min_data_in_leaf: int = 50
    feature_fraction: float = 0.7
    bagging_fraction: float = 0.8
    bagging_freq: int = 1
    lambda_l2: float = 10.0
    max_rounds: int = 1000
    early_stopping_rounds: int = 100
    truncation_level: int = 20
    eval_at: int = 10
    threads: int = 1
    """One thread: on a shared 2-core machine, OpenMP's spinning threads made 2 eight times slower."""
    seed: int = 0
    members: int = 5
    """Boosters averaged (seed bagging): the inner CV picks the rounds once, then ``members``
    boosters are trained on all the queries with LightGBM seeds ``seed``, ``seed + 1``, …
    and serve their mean score. One booster's held-out nDCG@10 moved with the fold split
    and with numerically tiny feature changes by up to .025 on cisi (76 queries); five
    members won all six (collection, fold seed) pairs against one, +.001 to +.011 nDCG@10
    (DECISIONS 44). The training cost is the inner CV plus ``members`` short final
    trainings; the serving cost is ``members`` times LightGBM's time per query."""
    balance_collections: bool = True
    """When a training set pools several collections (query ids ``name:…``), weight each
    query so every collection carries the same total weight: otherwise thousands of
    crawl-derived known-item queries drown a few hundred abstract queries, and the model
    learns one kind of data only."""

    def lightgbm(self) -> dict[str, Any]:
        return {
            "objective": "lambdarank",
            "metric": "ndcg",
            "eval_at": [self.eval_at],
            "learning_rate": self.learning_rate,
            "num_leaves": self.num_leaves,
            "min_data_in_leaf": self.min_data_in_leaf,
            "feature_fraction": self.feature_fraction,
            "bagging_fraction": self.bagging_fraction,
            "bagging_freq": self.bagging_freq,
            "lambda_l2": self.lambda_l2,
            "lambdarank_truncation_level": self.truncation_level,
            "num_threads": self.threads,
            "seed": self.seed,
            "deterministic": True,
            "force_row_wise": True,
            "verbosity": -1,
        }


@dataclass(frozen=True, slots=True)
class Split:
    """One outer fold: the queries a model may learn from, and the queries it is scored on."""

    fold: int
    train: tuple[str, ...]
    test: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Fit:
    """A model trained on some queries, with how its number of rounds was chosen."""

    boosters: tuple[lgb.Booster, ...]
    """The bagged members (``LtrParams.members``), all trained for ``rounds`` rounds."""
    rounds: int
    inner_best: tuple[int, ...]
    """Best iteration of each inner fold (early stopping on that fold's validation part)."""


@dataclass(frozen=True, slots=True)
class FoldReport:
    fold: int
    train_queries: int
    test_queries: int
    rounds: int
    inner_best: tuple[int, ...]
    metrics: dict[str, float]


@dataclass
class CvResult:
    folds: list[FoldReport]
    scores: dict[str, dict[DocId, float]] = field(default_factory=dict)
    """qid → doc id → score from the model of the fold that held the query out."""
    seconds: float = 0.0

    def means(self) -> dict[str, float]:
        """Query-weighted means over the test folds."""
        total = sum(f.test_queries for f in self.folds) or 1
        return {m: sum(f.metrics[m] * f.test_queries for f in self.folds) / total for m in METRICS}

    def collection_means(self, qrels: FullQrels) -> dict[str, dict[str, float]]:
        """Held-out means per pooled collection (``name:`` prefix): a pooled mean is
        mostly the largest collection's, and each collection is a claim of its own."""
        by_collection: dict[str, list[str]] = {}
        for qid in self.scores:
            by_collection.setdefault(collection_of(qid), []).append(qid)
        return {name: metrics_of(self.scores, qrels, qids) for name, qids in sorted(by_collection.items())}


def query_folds(qids: Sequence[str], k: int = DEFAULT_FOLDS, *, seed: int = 0) -> dict[str, int]:
    """Deterministic shuffled assignment of query ids to ``k`` folds (sizes differ by ≤ 1)."""
    order = sorted(set(qids))
    random.Random(seed).shuffle(order)
    return {qid: i % k for i, qid in enumerate(order)}


def outer_folds(
    qids: Sequence[str], k: int = DEFAULT_FOLDS, *, seed: int = 0, fixed: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Query id → fold: a query with a ``fixed`` fold keeps it (modulo ``k``, so queries
    that share a fold still do); the others get :func:`query_folds`'s seeded split."""
    fixed = fixed or {}
    free = [q for q in qids if q not in fixed]
    out = query_folds(free, k, seed=seed) if free else {}
    out.update({q: fixed[q] % k for q in qids if q in fixed})
    return out


def cv_splits(
    qids: Sequence[str], k: int = DEFAULT_FOLDS, *, seed: int = 0, fixed: Mapping[str, int] | None = None
) -> list[Split]:
    """k outer splits of query ids: test = fold f, train = every other fold (see :func:`outer_folds`)."""
    if k < 2:
        raise ConfigError(f"folds={k}: need at least 2.")
    fold = outer_folds(qids, k, seed=seed, fixed=fixed)
    ordered = sorted(fold)
    return [
        Split(
            fold=f,
            train=tuple(q for q in ordered if fold[q] != f),
            test=tuple(q for q in ordered if fold[q] == f),
        )
        for f in range(k)
    ]


def collection_of(qid: str) -> str:
    """The collection a pooled query id belongs to (its ``name:`` prefix; "" when unprefixed)."""
    name, sep, _ = qid.partition(":")
    return name if sep else ""


def collection_weights(qids: Sequence[str]) -> dict[str, float] | None:
    """Query id → weight giving every collection among ``qids`` the same total weight.

    Weights average 1 over ``qids``, so regularisation (``lambda_l2``, leaf hessians)
    means what it means unweighted. None when ``qids`` come from one collection only.
    """
    unique = list(dict.fromkeys(qids))
    sizes: dict[str, int] = {}
    for qid in unique:
        sizes[collection_of(qid)] = sizes.get(collection_of(qid), 0) + 1
    if len(sizes) < 2:
        return None
    share = len(unique) / len(sizes)
    return {qid: share / sizes[collection_of(qid)] for qid in unique}


def _dataset(
    frame: pl.DataFrame,
    qids: Sequence[str],
    *,
    reference: lgb.Dataset | None = None,
    balance: bool = False,
) -> lgb.Dataset:
    part = frame.filter(pl.col("qid").is_in(list(qids))).sort("qid", maintain_order=True)
    groups = part.group_by("qid", maintain_order=True).len()["len"].to_numpy()
    weights = collection_weights(part["qid"].to_list()) if balance else None
    # LightGBM's lambdarank multiplies each row's gradient by its weight, so a weight
    # that is constant within a query weights that query.
    row_weight = part["qid"].replace_strict(weights, return_dtype=pl.Float64).to_numpy() if weights else None
    return lgb.Dataset(
        part.select(SCHEMA).to_numpy(),
        label=part["label"].to_numpy(),
        group=groups,
        weight=row_weight,
        feature_name=list(SCHEMA),
        reference=reference,
        free_raw_data=False,
        params={"verbosity": -1},
    )


def train_booster(
    frame: pl.DataFrame,
    train: Sequence[str],
    valid: Sequence[str] | None,
    params: LtrParams,
    *,
    rounds: int | None = None,
) -> tuple[lgb.Booster, int]:
    """Train on ``train`` queries; early-stop on ``valid`` ones (or run ``rounds`` rounds)."""
    balance = params.balance_collections
    train_set = _dataset(frame, train, balance=balance)
    if valid:
        valid_set = _dataset(frame, valid, reference=train_set, balance=balance)
        booster = lgb.train(
            params.lightgbm(),
            train_set,
            num_boost_round=params.max_rounds,
            valid_sets=[valid_set],
            valid_names=["valid"],
            callbacks=[lgb.early_stopping(params.early_stopping_rounds, verbose=False)],
        )
        best = int(booster.best_iteration or params.max_rounds)
        return booster, best
    n = rounds or params.max_rounds
    return lgb.train(params.lightgbm(), train_set, num_boost_round=n), n


def score_frame(
    frame: pl.DataFrame, predict: Callable[[np.ndarray], np.ndarray]
) -> dict[str, dict[DocId, float]]:
    """qid → doc id → score for every row of ``frame``."""
    values = predict(frame.select(SCHEMA).to_numpy())
    out: dict[str, dict[DocId, float]] = {}
    for qid, doc_id, score in zip(frame["qid"].to_list(), frame["doc_id"].to_list(), values, strict=True):
        out.setdefault(qid, {})[DocId(int(doc_id))] = float(score)
    return out


def metrics_of(
    scores: Mapping[str, Mapping[DocId, float]], qrels: FullQrels, qids: Sequence[str]
) -> dict[str, float]:
    run = {q: {str(d): s for d, s in scores.get(q, {}).items()} for q in qids}
    return evaluate_run(run, {q: qrels.get(q, {}) for q in qids}).means


def fit(
    frame: pl.DataFrame,
    qids: Sequence[str],
    params: LtrParams,
    *,
    inner_folds: int = DEFAULT_INNER_FOLDS,
    seed: int = 0,
) -> Fit:
    """Train on ``qids`` only: inner CV picks the rounds, then ``params.members`` boosters on all of them.

    Each inner fold trains on the other inner folds and early-stops on its own
    validation part; the mean best iteration is the number of rounds of the final model
    (a single early-stopping split of a few dozen queries is too noisy to trust alone).
    The members differ only in LightGBM's sampling seed.
    """
    inner_best: list[int] = []
    for split in cv_splits(qids, inner_folds, seed=seed + 1):
        _, best = train_booster(frame, split.train, split.test, params)
        inner_best.append(best)
    rounds = max(1, round(float(np.mean(inner_best))))
    boosters = tuple(
        train_booster(frame, qids, None, dataclasses.replace(params, seed=params.seed + i), rounds=rounds)[0]
        for i in range(max(1, params.members))
    )
    return Fit(boosters, rounds, tuple(inner_best))


def cross_validate(
    frame: pl.DataFrame,
    qrels: FullQrels,
    params: LtrParams,
    *,
    folds: int = DEFAULT_FOLDS,
    inner_folds: int = DEFAULT_INNER_FOLDS,
    seed: int = 0,
    fixed_folds: Mapping[str, int] | None = None,
    on_progress: ProgressFn | None = None,
) -> CvResult:
    """k-fold CV by query: each query scored only by the model of the fold that held it out.

    ``fixed_folds``: query id → fold for queries whose collection fixes its folds.
    """
    started = time.perf_counter()
    judged = [q for q in dict.fromkeys(frame["qid"].to_list()) if qrels.get(q)]
    result = CvResult(folds=[])
    for split in cv_splits(judged, folds, seed=seed, fixed=fixed_folds):
        model = fit(frame, split.train, params, inner_folds=inner_folds, seed=seed)
        test = frame.filter(pl.col("qid").is_in(list(split.test)))
        scores = score_frame(test, functools.partial(predict_mean, model.boosters))
        result.scores.update(scores)
        metrics = metrics_of(scores, qrels, split.test)
        result.folds.append(
            FoldReport(
                split.fold,
                len(split.train),
                len(split.test),
                model.rounds,
                model.inner_best,
                metrics,
            )
        )
        logger.info("fold %d: %d rounds, nDCG@10 %.4f", split.fold, model.rounds, metrics["ndcg@10"])
        if on_progress is not None:
            on_progress("cross-validation", split.fold + 1, folds)
    result.seconds = time.perf_counter() - started
    return result


def code_version() -> str:
    """The git revision of this checkout, ``+dirty`` when it has uncommitted changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return rev + ("+dirty" if dirty else "")


def train_ltr(
    frame: pl.DataFrame,
    qrels: FullQrels,
    *,
    name: str,
    data: Sequence[Mapping[str, Any]],
    params: LtrParams | None = None,
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    fixed_folds: Mapping[str, int] | None = None,
    default_ranker: Mapping[str, Any] | None = None,
    on_progress: ProgressFn | None = None,
) -> tuple[LtrModel, CvResult]:
    """Cross-validate, then train the deployable model on every query; returns it with its card.

    ``default_ranker``: why the service serves this model by default (or not), recorded
    in the card beside the figures it rests on.
    """
    params = params or LtrParams()
    started = time.perf_counter()
    cv = cross_validate(
        frame, qrels, params, folds=folds, seed=seed, fixed_folds=fixed_folds, on_progress=on_progress
    )
    qids = [q for q in dict.fromkeys(frame["qid"].to_list()) if qrels.get(q)]
    final = fit(frame, qids, params, seed=seed)
    rounds = final.rounds
    if on_progress is not None:
        on_progress("final model", 1, 1)
    card = {
        "name": name,
        "model_id": model_id_of(final.boosters, name),
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "code_version": code_version(),
        "lightgbm_version": lgb.__version__,
        "data": list(data),
        "rows": frame.height,
        "queries": len(qids),
        "params": dataclasses.asdict(params),
        "lightgbm_params": params.lightgbm(),
        "num_boost_round": rounds,
        "cv": {
            "folds": folds,
            "seed": seed,
            "split": "by query: test = fold f; train = the other folds, whose own inner "
            f"{DEFAULT_INNER_FOLDS}-fold CV by query (early stopping) picks the rounds; a collection "
            "with folds.tsv keeps its folds (fold mod k) in the outer split",
            "fixed_fold_queries": sum(1 for q in qids if fixed_folds and q in fixed_folds),
            "per_fold": [dataclasses.asdict(f) for f in cv.folds],
            "means": cv.means(),
            "collection_means": cv.collection_means(qrels),
        },
        "training_seconds": round(time.perf_counter() - started, 2),
    }
    if default_ranker is not None:
        card["default_ranker"] = dict(default_ranker)
    model = LtrModel(boosters=final.boosters, features=SCHEMA, card=card)
    return model, cv


@dataclass(frozen=True, slots=True)
class PooledCollections:
    """Several judged collections as one training set; query ids are prefixed ``name:`` to keep them apart.

    Doc ids need no prefix: they hash the collection name with the document id.
    """

    frame: pl.DataFrame
    labels: dict[str, dict[DocId, int]]
    """Prefixed qid → doc id → grade (every judgment, candidates or not)."""
    datasets: tuple[BeirDataset, ...]
    built: tuple[CollectionFrame, ...]


def collection_prefix(dataset: BeirDataset) -> str:
    """What a collection's query ids are prefixed with in a pooled training set."""
    return f"{dataset.name}:"


def pool_collections(
    roots: Sequence[Path],
    settings: Settings,
    *,
    depth: int | None = None,
    on_progress: ProgressFn | None = None,
) -> PooledCollections:
    """Candidate frames and labels of every collection in ``roots`` (each frame cached on disk).

    Progress is reported as ``("features · NAME", done, total)``, or once as
    ``("features · NAME (cached)", 1, 1)`` when the frame came from its Parquet cache.
    """
    frames: list[pl.DataFrame] = []
    labels: dict[str, dict[DocId, int]] = {}
    datasets: list[BeirDataset] = []
    built_frames: list[CollectionFrame] = []
    for root in roots:
        beir = BeirDataset.open(root)
        what = f"features · {beir.name}"
        reported = False

        def on_features(done: int, total: int, what: str = what) -> None:
            nonlocal reported
            reported = True
            if on_progress is not None:
                on_progress(what, done, total)

        built = collection_frame(root, settings, depth=depth, on_progress=on_features)
        if not reported and on_progress is not None:
            on_progress(f"{what} (cached)", 1, 1)
        prefix = collection_prefix(beir)
        frames.append(built.frame.with_columns((pl.lit(prefix) + pl.col("qid")).alias("qid")))
        for qid, judged in beir_labels(beir, beir.qrels()).items():
            labels[prefix + qid] = dict(judged)
        datasets.append(beir)
        built_frames.append(built)
    return PooledCollections(
        frame=pl.concat(frames, how="vertical"),
        labels=labels,
        datasets=tuple(datasets),
        built=tuple(built_frames),
    )


def train_ltr_on_collections(
    roots: Sequence[Path],
    settings: Settings,
    *,
    name: str,
    folds: int = DEFAULT_FOLDS,
    depth: int | None = None,
    seed: int = 0,
    members: int | None = None,
    on_progress: ProgressFn | None = None,
) -> tuple[LtrModel, CvResult]:
    """``trawl train ltr``: pool the collections' hybrid candidates, cross-validate, train, card.

    The card's ``data`` records, per collection, where its frame came from and how its
    candidates were made, so the run can be reproduced from the cached frames.
    """
    pooled = pool_collections(roots, settings, depth=depth, on_progress=on_progress)
    qrels = {q: {str(d): g for d, g in judged.items()} for q, judged in pooled.labels.items()}
    data = [
        {
            "dataset": beir.name,
            "path": str(root),
            "fingerprint": beir.fingerprint(),
            "queries": built.frame["qid"].n_unique(),
            "rows": built.frame.height,
            "frame": str(built.path),
            "candidates": f"hybrid union: lexical top-{built.depth} ∪ vector top-{built.depth}",
            "embed_model": settings.embed.model_dump(mode="json"),
            "folds": "folds.tsv (by target page)" if beir.folds() else f"seeded split by query (seed {seed})",
        }
        for root, beir, built in zip(roots, pooled.datasets, pooled.built, strict=True)
    ]
    fixed = {
        collection_prefix(beir) + qid: fold
        for beir in pooled.datasets
        for qid, fold in (beir.folds() or {}).items()
    }
    params = dataclasses.replace(LtrParams(), seed=seed)
    if members is not None:
        params = dataclasses.replace(params, members=members)
    if on_progress is not None:
        on_progress("cross-validation", 0, folds)
        on_progress("final model", 0, 1)
    return train_ltr(
        pooled.frame,
        qrels,
        name=name,
        data=data,
        params=params,
        folds=folds,
        seed=seed,
        fixed_folds=fixed,
        default_ranker=service_default(),
        on_progress=on_progress,
    )


def service_default() -> dict[str, Any]:
    """The card's record of when the service serves an LTR model by default, and why."""
    return {
        "auto_order": list(AUTO_RANKERS),
        "default_when": "this model is served (models/ltr/default or rank.ltr_model) and the "
        "index has vectors; else hybrid, else bm25",
        "why": AUTO_REASONS["ltr"],
        "choice_metric": "ndcg@10 held out through the served path (rankers.toml ltr, ltr-transfer); "
        "mrr@10 reported beside it",
    }


def save_frame(frame: pl.DataFrame, path: Path) -> Path:
    """Write a training frame as Parquet so the run can be reproduced from it."""
    return write_with(path, frame.write_parquet)
