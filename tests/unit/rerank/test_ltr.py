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
from retrieval.analyzer import parse_query
from retrieval.hybrid import Candidate
from retrieval.lexical import StoredDoc
from retrieval.ranking import RankContext

NOW = 1_700_000_000.0


def tiny_model() -> LtrModel:
    """A real LightGBM ranker over the full schema (label follows bm25 and coverage)."""
    rng = np.random.default_rng(0)
    x = rng.random((600, len(SCHEMA)))
    x[rng.random(x.shape) < 0.1] = np.nan
    y = (np.nan_to_num(x[:, 0]) + np.nan_to_num(x[:, SCHEMA.index("coverage_body")]) > 1.2).astype(int)
    train = lgb.Dataset(x, label=y, group=[20] * 30, feature_name=list(SCHEMA))
    booster = lgb.train(
        {"objective": "lambdarank", "verbosity": -1, "num_threads": 1, "min_data_in_leaf": 5},
        train,
        num_boost_round=15,
    )
    return LtrModel(booster=booster, features=SCHEMA, card={"name": "tiny"})


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


def test_model_with_another_schema_is_refused(tmp_path: Path) -> None:
    path = tiny_model().save(tmp_path / "m")
    card = json.loads((path / "card.json").read_text())
    card["features"] = card["features"][:-1]
    (path / "card.json").write_text(json.dumps(card))
    with pytest.raises(ModelLoadError, match=re.escape("trained on a different feature schema")):
        LtrModel.load(path)


def test_missing_model_directory_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=re.escape("train one with `trawl train ltr`")):
        LtrModel.load(tmp_path / "nothing")
