"""Pooled training: each collection carries the same total weight, whatever its query count."""

from __future__ import annotations

import dataclasses

import numpy as np
import polars as pl
import pytest

from rerank.features import SCHEMA
from training.frames import frame_schema
from training.train_ltr import LtrParams, collection_weights, metrics_of, score_frame, train_booster

FAST = LtrParams(max_rounds=60, early_stopping_rounds=10, min_data_in_leaf=5, learning_rate=0.2)


def test_every_collection_gets_the_same_total_weight_and_weights_average_one() -> None:
    qids = [f"big:{i}" for i in range(90)] + [f"small:{i}" for i in range(10)]
    weights = collection_weights(qids + qids[:5])  # repeated ids (rows of one query) count once
    assert weights is not None
    assert sum(w for q, w in weights.items() if q.startswith("big:")) == pytest.approx(50.0)
    assert sum(w for q, w in weights.items() if q.startswith("small:")) == pytest.approx(50.0)
    assert np.mean(list(weights.values())) == pytest.approx(1.0)
    assert weights["small:0"] == pytest.approx(9 * weights["big:0"])


def test_one_collection_is_not_weighted() -> None:
    assert collection_weights([f"cranfield:{i}" for i in range(5)]) is None
    assert collection_weights(["q1", "q2"]) is None


def two_collections(big: int, small: int, docs: int, *, seed: int) -> tuple[pl.DataFrame, dict]:
    """Two collections that disagree: in the large one the relevant document has the highest
    feature 0, in the small one the lowest; feature 1 tells them apart (as document length
    tells an abstract from a web page)."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    qrels: dict[str, dict[str, int]] = {}
    doc_id = 0
    for name, count, sign in (("big", big, 1.0), ("small", small, -1.0)):
        for q in range(count):
            qid = f"{name}:{q}"
            values = rng.random((docs, len(SCHEMA)))
            values[:, 1] = 0.5 - sign / 2
            relevant = int(np.argmax(sign * values[:, 0]))
            for d in range(docs):
                doc_id += 1
                label = int(d == relevant)
                row: dict[str, object] = {"dataset": name, "qid": qid, "doc_id": doc_id, "label": label}
                row.update({f: float(values[d, j]) for j, f in enumerate(SCHEMA)})
                rows.append(row)
                if label:
                    qrels.setdefault(qid, {})[str(doc_id)] = 1
    return pl.DataFrame(rows, schema=frame_schema()), qrels


def test_balancing_lets_a_small_collection_teach_the_model() -> None:
    frame, _ = two_collections(1000, 20, 10, seed=0)  # 50 : 1, as pydocs : cisi
    held_out, probe_frame = two_collections(0, 40, 10, seed=1)
    probe = sorted(probe_frame)
    train = sorted(frame["qid"].unique().to_list())

    def small_ndcg(balance: bool) -> float:
        params = dataclasses.replace(FAST, balance_collections=balance)
        booster, _ = train_booster(frame, train, None, params, rounds=30)
        return metrics_of(score_frame(held_out, booster.predict), probe_frame, probe)["ndcg@10"]

    assert small_ndcg(True) > small_ndcg(False) + 0.1
