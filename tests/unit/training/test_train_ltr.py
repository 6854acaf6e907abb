"""Cross-validation by query: splits, no leakage of a query's judgments, the model card."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from rerank.features import SCHEMA
from rerank.ltr import LtrModel
from training.frames import frame_schema
from training.train_ltr import (
    LtrParams,
    cross_validate,
    cv_splits,
    metrics_of,
    query_folds,
    score_frame,
    train_booster,
    train_ltr,
)

FAST = LtrParams(max_rounds=60, early_stopping_rounds=10, min_data_in_leaf=5, learning_rate=0.2)


def synthetic_frame(queries: int, docs: int, *, seed: int, signal: bool) -> tuple[pl.DataFrame, dict]:
    """Random features; with ``signal`` the label follows column 0 (learnable across queries)."""
    rng = np.random.default_rng(seed)
    values = rng.random((queries * docs, len(SCHEMA)))
    qids = [f"q{q:03d}" for q in range(queries) for _ in range(docs)]
    doc_ids = np.arange(1, queries * docs + 1)
    if signal:
        labels = (values[:, 0] > 0.8).astype(int) + (values[:, 0] > 0.95).astype(int)
    else:
        labels = np.zeros(queries * docs, dtype=int)
        labels[rng.integers(0, docs, queries) + np.arange(queries) * docs] = 1  # one random relevant each
    columns: dict[str, object] = {
        "dataset": ["synthetic"] * len(qids),
        "qid": qids,
        "doc_id": doc_ids,
        "label": labels,
    }
    columns.update({name: values[:, j] for j, name in enumerate(SCHEMA)})
    frame = pl.DataFrame(columns, schema=frame_schema())
    qrels: dict[str, dict[str, int]] = {}
    for qid, doc_id, label in zip(qids, doc_ids, labels, strict=True):
        if label > 0:
            qrels.setdefault(qid, {})[str(doc_id)] = int(label)
    return frame, qrels


def test_splits_partition_queries_and_never_test_on_training_queries() -> None:
    qids = [f"q{i}" for i in range(53)]
    splits = cv_splits(qids, 5, seed=3)
    tested = [q for s in splits for q in s.test]
    assert sorted(tested) == sorted(qids)  # every query scored exactly once
    for s in splits:
        assert not set(s.train) & set(s.test)
        assert sorted(s.train + s.test) == sorted(qids)
        assert len(s.test) in (10, 11)
    assert query_folds(qids, 5, seed=3) == query_folds(list(reversed(qids)), 5, seed=3)


def test_a_query_is_never_scored_by_a_model_that_saw_its_judgments() -> None:
    # Each query's relevant document is random: nothing generalizes, a model can only
    # memorize. Trained on a query, it ranks that query's relevant document high; held
    # out, it cannot do better than chance.
    frame, qrels = synthetic_frame(60, 12, seed=0, signal=False)
    memorize = dataclasses.replace(FAST, min_data_in_leaf=1, num_leaves=63, learning_rate=0.5, lambda_l2=0.0)
    qids = sorted(qrels)
    leaky, _ = train_booster(frame, qids, None, memorize, rounds=200)
    seen = metrics_of(score_frame(frame, leaky.predict), qrels, qids)["ndcg@10"]
    assert seen > 0.9  # the probe works: memorized queries are ranked (almost) perfectly
    cv = cross_validate(frame, qrels, memorize, folds=5)
    held_out = metrics_of(cv.scores, qrels, qids)["ndcg@10"]
    assert held_out < 0.6
    assert sorted(cv.scores) == qids
    assert sum(f.test_queries for f in cv.folds) == 60
    assert all(f.train_queries == 60 - f.test_queries for f in cv.folds)


def test_cross_validation_learns_a_real_signal() -> None:
    frame, qrels = synthetic_frame(60, 15, seed=1, signal=True)
    cv = cross_validate(frame, qrels, FAST, folds=3)
    assert cv.means()["ndcg@10"] > 0.95
    assert all(len(f.inner_best) == 4 and f.rounds >= 1 for f in cv.folds)


def test_model_card_round_trip(tmp_path: Path) -> None:
    frame, qrels = synthetic_frame(30, 10, seed=2, signal=True)
    data = [{"dataset": "synthetic", "queries": 30}]
    model, cv = train_ltr(frame, qrels, name="tiny", data=data, params=FAST, folds=3)
    saved = model.save(tmp_path / "tiny")
    loaded = LtrModel.load(saved)
    card = json.loads((saved / "card.json").read_text())
    assert loaded.card == card
    assert card["features"] == list(SCHEMA)
    assert card["data"] == data
    assert card["params"] == dataclasses.asdict(FAST)
    assert [f["metrics"] for f in card["cv"]["per_fold"]] == [f.metrics for f in cv.folds]
    assert card["cv"]["means"] == pytest.approx(cv.means())
    assert card["code_version"] and card["created_at"] and card["model_id"].startswith("tiny-")
    assert loaded.model_id == model.model_id == card["model_id"]
    x = frame.select(SCHEMA).to_numpy()
    assert np.array_equal(loaded.score(x), model.score(x))
    # saving again over the same directory replaces it whole
    model.save(saved)
    members = [f"model-{i}.txt" for i in range(1, FAST.members)]
    assert sorted(p.name for p in saved.iterdir()) == sorted(["card.json", "model.txt", *members])
    assert card["members"] == FAST.members == len(loaded.boosters)


def test_fixed_folds_keep_queries_of_one_page_together_and_the_rest_split_by_query() -> None:
    # Queries "web:p{page}-{n}" share a target page and the collection's folds.tsv puts a
    # page's queries in one fold: the pooled CV tests them there, so no page is trained and
    # tested on; the other collection's queries keep the seeded split by query.
    frame, qrels = synthetic_frame(60, 10, seed=4, signal=True)
    rename = {f"q{q:03d}": (f"web:p{q // 3}-{q % 3}" if q < 30 else f"abs:q{q:03d}") for q in range(60)}
    frame = frame.with_columns(pl.col("qid").replace_strict(rename))
    qrels = {rename[q]: judged for q, judged in qrels.items()}
    fixed = {q: (int(q[5:].split("-")[0]) * 7) % 5 for q in rename.values() if q.startswith("web:")}
    free = sorted(q for q in qrels if not q.startswith("web:"))
    expected = {q: fixed[q] % 3 for q in qrels if q in fixed} | query_folds(free, 3)
    cv = cross_validate(frame, qrels, FAST, folds=3, fixed_folds=fixed)
    assert sorted(cv.scores) == sorted(qrels)
    for report in cv.folds:
        test = sorted(q for q, f in expected.items() if f == report.fold)
        assert report.test_queries == len(test)
        assert report.metrics == pytest.approx(metrics_of(cv.scores, qrels, test))
        train_pages = {q.split("-")[0] for q, f in expected.items() if f != report.fold and q in fixed}
        assert not train_pages & {q.split("-")[0] for q in test if q in fixed}
    means = cv.collection_means(qrels)
    assert sorted(means) == ["abs", "web"]
    assert means["abs"] == pytest.approx(metrics_of(cv.scores, qrels, free))
