"""The LTR stage: ordering, explain contributions summing to the score, model loading."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pytest

from core.errors import ModelLoadError
from core.types import DocId
from rerank.features import SCHEMA, FeatureContext, compute_features
from rerank.ltr import LtrModel, LtrStage
from retrieval.index.lexical import StoredDoc
from retrieval.query.hybrid import Candidate
from retrieval.query.ranking import RankContext
from retrieval.text.analyzer import parse_query

NOW = 1_700_000_000.0


def tiny_model(members: int = 1) -> LtrModel:
    """A real LightGBM ranker over the full schema (label follows bm25 and coverage); with
    ``members``, boosters that differ in their sampling seed, as bagged training makes them."""
    rng = np.random.default_rng(0)
    x = rng.random((600, len(SCHEMA)))
    x[rng.random(x.shape) < 0.1] = np.nan
    y = (np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, SCHEMA.index("coverage_body")]) > 1.2).astype(int)
    train = lgb.Dataset(x, label=y, group=[20] * 30, feature_name=list(SCHEMA), free_raw_data=False)
    params = {"objective": "lambdarank", "verbosity": -1, "num_threads": 1, "min_data_in_leaf": 5}
    sampled = {"bagging_fraction": 0.7, "bagging_freq": 1, "feature_fraction": 0.7}
    boosters = tuple(
        lgb.train(params | (sampled | {"seed": i} if members > 1 else {}), train, num_boost_round=15)
        for i in range(members)
    )
    return LtrModel(boosters=boosters, features=SCHEMA, card={"name": "tiny"})


def _doc(doc_id: int, title: str, body: str) -> StoredDoc:
    return StoredDoc(DocId(doc_id), f"https://x.org/{doc_id}", title, body, (), "", "", "x.org", "en", "html")


DOCS = {
    DocId(1): _doc(1, "Wing flow", "Flow over a wing at high speed."),
    DocId(2): _doc(2, "Heat", "Heat transfer in the boundary layer."),
    DocId(3): _doc(3, "Wing", "Wing flutter and the flow around wings."),
}
CANDIDATES = [
    Candidate(DocId(1), 0, 5.0, 0.7, 2, 1, (("title", 2.0), ("body", 4.0))),
    Candidate(DocId(2), 0, 1.0, None, 3, None, (("body", 1.0),)),
    Candidate(DocId(3), 0, 6.0, 0.5, 1, 2, (("title", 1.0), ("body", 5.0))),
]


def _context() -> RankContext:
    def fetch(candidates: Sequence[Candidate]) -> Mapping[DocId, StoredDoc]:
        return {c.doc_id: DOCS[c.doc_id] for c in candidates}

    return RankContext(fetch=fetch, generation="g1")


def test_stage_orders_by_model_score_and_explains_with_contributions() -> None:
    model = tiny_model()
    stage = LtrStage(model, clock=lambda: NOW)
    query = parse_query("wing flow")
    out = stage.rank(query, CANDIDATES, explain=True, context=_context())
    values = compute_features(query, CANDIDATES, DOCS, context=FeatureContext(now_s=NOW)).values
    expected = model.score(values)
    want = sorted(zip((1, 2, 3), expected, strict=True), key=lambda p: (-p[1], p[0]))
    assert [(h.doc_id, h.score) for h in out.ranked] == [(d, float(s)) for d, s in want]
    assert set(out.explain) == {1, 2, 3}
    for hit in out.ranked:
        info = out.explain[hit.doc_id]["ltr"]
        assert info["model"] == model.model_id
        assert info["score"] == hit.score
        total = info["bias"] + sum(info["contributions"].values())
        assert total == pytest.approx(hit.score, abs=1e-9)
        assert set(info["features"]) == set(SCHEMA)
        json.dumps(info, allow_nan=False)  # NaN features are reported as null: valid JSON
    assert out.explain[DocId(2)]["ltr"]["features"]["cosine"] is None


def test_stage_without_explain_returns_no_explanations() -> None:
    out = LtrStage(tiny_model(), clock=lambda: NOW).rank(
        parse_query("wing"), CANDIDATES, explain=False, context=_context()
    )
    assert out.explain == {} and len(out.ranked) == 3


def test_model_naming_a_feature_this_code_does_not_compute_is_refused(tmp_path: Path) -> None:
    path = tiny_model().save(tmp_path / "m")
    card = json.loads((path / "card.json").read_text())
    card["features"] = [*card["features"][:-1], "no_such_feature"]
    (path / "card.json").write_text(json.dumps(card))
    with pytest.raises(ModelLoadError, match=re.escape("does not compute (no_such_feature)")):
        LtrModel.load(path)


def test_card_and_booster_disagreeing_on_the_feature_count_is_refused(tmp_path: Path) -> None:
    path = tiny_model().save(tmp_path / "m")
    card = json.loads((path / "card.json").read_text())
    card["features"] = card["features"][:-1]
    (path / "card.json").write_text(json.dumps(card))
    with pytest.raises(
        ModelLoadError, match=re.escape(f"model has {len(SCHEMA)} features, card {len(SCHEMA) - 1}")
    ):
        LtrModel.load(path)


def test_a_model_of_an_older_schema_scores_on_its_own_columns(tmp_path: Path) -> None:
    """A model trained before a feature existed (and with its columns in another order)
    keeps ranking exactly as it did: it is given its own columns, by name."""
    older = tuple(reversed([name for name in SCHEMA if name != "dense_prf_top5"]))
    rng = np.random.default_rng(1)
    x = rng.random((400, len(older)))
    y = (x[:, older.index("bm25")] + x[:, older.index("coverage_body")] > 1.1).astype(int)
    train = lgb.Dataset(x, label=y, group=[20] * 20, feature_name=list(older), free_raw_data=False)
    params = {"objective": "lambdarank", "verbosity": -1, "num_threads": 1, "min_data_in_leaf": 5}
    booster = lgb.train(params, train, num_boost_round=10)
    path = LtrModel(boosters=(booster,), features=older, card={"name": "older"}).save(tmp_path / "older")
    model = LtrModel.load(path)
    assert model.features == older
    query = parse_query("wing flow")
    out = LtrStage(model, clock=lambda: NOW).rank(query, CANDIDATES, explain=True, context=_context())
    full = compute_features(query, CANDIDATES, DOCS, context=FeatureContext(now_s=NOW)).values
    own = full[:, [SCHEMA.index(name) for name in older]]
    expected = booster.predict(own, num_threads=1)
    assert {h.doc_id: h.score for h in out.ranked} == {
        d: float(s) for d, s in zip((1, 2, 3), expected, strict=True)
    }
    assert set(out.explain[DocId(1)]["ltr"]["features"]) == set(older)
    # Nor does it ask the shards for document vectors, which only dense_prf reads.
    assert not LtrStage(model).with_doc_vectors
    assert LtrStage(tiny_model()).with_doc_vectors


def test_missing_model_directory_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=re.escape("train one with `trawl train ltr`")):
        LtrModel.load(tmp_path / "nothing")


def test_a_bagged_model_scores_the_members_mean_and_explains_it_exactly(tmp_path: Path) -> None:
    model = tiny_model(members=3)
    values = compute_features(
        parse_query("wing flow"), CANDIDATES, DOCS, context=FeatureContext(now_s=NOW)
    ).values
    each = [b.predict(values, num_threads=1) for b in model.boosters]
    assert not np.allclose(each[0], each[1])  # the members differ
    assert model.score(values) == pytest.approx(np.mean(each, axis=0), abs=1e-12)
    contrib = model.contributions(values)
    assert contrib.sum(axis=1) == pytest.approx(model.score(values), abs=1e-9)  # SHAP stays additive

    loaded = LtrModel.load(model.save(tmp_path / "bagged"))
    assert sorted(p.name for p in (tmp_path / "bagged").glob("model*.txt")) == [
        "model-1.txt", "model-2.txt", "model.txt"
    ]  # fmt: skip
    assert json.loads((tmp_path / "bagged" / "card.json").read_text())["members"] == 3
    assert loaded.model_id == model.model_id
    assert loaded.score(values) == pytest.approx(model.score(values), abs=1e-12)


def test_a_one_booster_model_keeps_its_files_and_id(tmp_path: Path) -> None:
    """Models saved before bagging (one ``model.txt``, no ``members`` in the card) load as before."""
    from rerank.ltr import model_id_of

    model = tiny_model()
    directory = model.save(tmp_path / "one")
    card = json.loads((directory / "card.json").read_text())
    del card["members"]
    (directory / "card.json").write_text(json.dumps(card))
    loaded = LtrModel.load(directory)
    assert [p.name for p in directory.glob("model*.txt")] == ["model.txt"]
    assert len(loaded.boosters) == 1
    assert model.model_id == model_id_of(model.boosters[0], "tiny")


def test_a_bagged_model_missing_a_member_is_refused(tmp_path: Path) -> None:
    directory = tiny_model(members=2).save(tmp_path / "bagged")
    (directory / "model-1.txt").unlink()
    with pytest.raises(ModelLoadError, match="missing model-1.txt"):
        LtrModel.load(directory)
