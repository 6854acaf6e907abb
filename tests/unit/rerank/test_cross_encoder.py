"""The cross-encoder stage reorders only the head; the ``ltr+ce`` CV never scores a query it trained on."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from core.types import DocId, Query, ScoredDoc
from rerank.cross_encoder import CrossEncoderReranker, CrossEncoderStage, document_text, rerank_head
from retrieval.index.lexical import StoredDoc
from retrieval.query.hybrid import Candidate
from retrieval.query.ranking import RankContext, RankOutput
from retrieval.text.analyzer import parse_query
from training.rankers_ce import choose_weights, combine, cross_validate_ce
from training.train_ltr import cv_splits
from training.train_reranker import RerankerParams, fine_tune, sample_pairs, save_reranker

QUERY = "flutter of swept wings at supersonic speed"
BODIES = {
    1: ("Heat transfer", "Heat transfer in a laminar boundary layer on a cooled flat plate."),
    2: ("Wing flutter", "Flutter of swept wings at supersonic speed, measured in a wind tunnel."),
    3: ("Shells", "Buckling of thin cylindrical shells under axial compression."),
    4: ("Supersonic wings", "Supersonic flow over swept wings and their flutter boundaries."),
    5: ("Jets", "Noise of a subsonic jet."),
    6: ("Plates", "Vibration of plates."),
}
DOCS = {
    DocId(i): StoredDoc(DocId(i), f"beir://t/{i}", t, b, (), "", str(i), "t", "en", "txt")
    for i, (t, b) in BODIES.items()
}


@pytest.fixture(scope="module")
def reranker() -> CrossEncoderReranker:
    from retrieval.vectors.embed import default_model_path

    return CrossEncoderReranker.load(default_model_path(), seed=0)


class FixedStage:
    """A real RankStage that returns a given order (stands in for LTR)."""

    name = "fixed"
    needs_vector = False
    with_fields = False
    with_doc_vectors = False

    def __init__(self, order: Sequence[int]) -> None:
        self.order = order

    def rank(
        self, query: Query, candidates: Sequence[Candidate], *, explain: bool, context: RankContext
    ) -> RankOutput:
        context.fetch(candidates)
        ranked = [ScoredDoc(DocId(d), float(10 - i)) for i, d in enumerate(self.order)]
        return RankOutput(
            ranked, {DocId(d): {"ltr": {"score": float(10 - i)}} for i, d in enumerate(self.order)}
        )


def _context() -> RankContext:
    def fetch(candidates: Sequence[Candidate]) -> Mapping[DocId, StoredDoc]:
        return {c.doc_id: DOCS[c.doc_id] for c in candidates}

    return RankContext(fetch=fetch)


def test_rerank_head_blends_z_scores() -> None:
    ltr = np.array([3.0, 2.0, 1.0])
    ce = np.array([0.0, 5.0, 1.0])
    assert rerank_head(ltr, ce, weight=1.0) == [1, 2, 0]
    assert rerank_head(ltr, ce, weight=0.0) == [0, 1, 2]
    assert rerank_head(ltr, np.zeros(3), weight=1.0) == [0, 1, 2]  # no signal: LTR order kept


def test_stage_reorders_only_the_top_n_and_explains_moves(reranker: CrossEncoderReranker) -> None:
    head_ids = [1, 2, 4]
    ce = reranker.score(QUERY, [document_text(*BODIES[i]) for i in head_ids])
    # LTR puts the head in ascending cross-encoder order, so reranking must reverse it.
    ascending = [head_ids[i] for i in np.argsort(ce)]
    assert len(set(ce.tolist())) == 3
    stage = CrossEncoderStage(FixedStage([*ascending, 3, 5, 6]), reranker, top_n=3, weight=1.0)
    candidates = [Candidate(DocId(i), 0, 1.0, None, i, None) for i in BODIES]
    out = stage.rank(parse_query(QUERY), candidates, explain=True, context=_context())

    assert [h.doc_id for h in out.ranked] == [*reversed(ascending), 3, 5, 6]
    assert [h.score for h in out.ranked] == [10.0, 9.0, 8.0, 7.0, 6.0, 5.0]  # tail keeps LTR scores
    moves = {
        d: (v["ce"]["position_before"], v["ce"]["position_after"])
        for d, v in out.explain.items()
        if "ce" in v
    }
    assert moves == {DocId(ascending[0]): (1, 3), DocId(ascending[1]): (2, 2), DocId(ascending[2]): (3, 1)}
    expected = dict(zip(head_ids, ce.tolist(), strict=True))
    assert {d: out.explain[DocId(d)]["ce"]["score"] for d in head_ids} == pytest.approx(expected, abs=1e-6)
    assert all("ltr" in out.explain[DocId(d)] for d in BODIES)
    assert stage.last_ce_ms > 0


def test_untrained_head_is_deterministic_given_the_seed(reranker: CrossEncoderReranker) -> None:
    texts = [document_text(*BODIES[i]) for i in (1, 2)]
    first = reranker.score(QUERY, texts)
    assert np.array_equal(first, reranker.score(QUERY, texts))


def test_cv_never_scores_a_query_with_a_model_trained_on_it() -> None:
    qids = [f"q{i}" for i in range(23)]
    splits = cv_splits(qids, 5)
    ltr = {q: {DocId(d): float(-d) for d in range(1, 40)} for q in qids}
    trained_on: list[set[str]] = []
    scored: dict[str, int] = {}

    def train(train_qids: Sequence[str]):  # type: ignore[no-untyped-def]
        model = len(trained_on)
        trained_on.append(set(train_qids))

        def score(qid: str, doc_ids: Sequence[DocId]) -> list[float]:
            assert qid not in trained_on[model]
            assert list(doc_ids) == [DocId(d) for d in range(1, 21)]  # the LTR head only
            scored[qid] = scored.get(qid, 0) + 1
            return [float(d) for d in doc_ids]

        return score

    ce = cross_validate_ce(splits, ltr, train, top_n=20)
    assert scored == dict.fromkeys(qids, 1)
    assert sorted(ce) == sorted(qids)
    assert len(trained_on) == 5 and all(len(t) in (18, 19) for t in trained_on)


def test_combine_moves_the_head_and_keeps_the_tail() -> None:
    ltr = {DocId(d): float(10 - d) for d in range(1, 8)}
    ce = {DocId(1): 0.1, DocId(2): 0.9, DocId(3): 0.5}
    final = combine(ltr, ce, top_n=3, weight=1.0)
    assert sorted(final, key=lambda d: -final[d]) == [DocId(d) for d in (2, 3, 1, 4, 5, 6, 7)]


def test_pairs_come_from_the_given_queries_only() -> None:
    frame = pl.DataFrame(
        {
            "qid": ["a"] * 4 + ["b"] * 4,
            "doc_id": [1, 2, 3, 4, 1, 2, 3, 4],
            "rrf": [0.4, 0.3, 0.2, 0.1] * 2,
        }
    )
    qrels = {"a": {DocId(2): 1, DocId(9): 2}, "b": {DocId(1): 1}}
    params = RerankerParams(negatives_per_query=2, negative_pool=2)
    pairs = sample_pairs(frame, qrels, ["a"], {"a": "qa", "b": "qb"}, params)
    assert sorted(pairs) == [
        ("a", DocId(1), 0.0),
        ("a", DocId(2), 1.0),
        ("a", DocId(3), 0.0),
        ("a", DocId(9), 1.0),
    ]


@pytest.mark.slow
def test_fine_tune_save_and_load_round_trip(tmp_path: Path) -> None:
    from retrieval.vectors.embed import default_model_path

    model = CrossEncoderReranker.load(default_model_path(), seed=0)
    pairs = [(QUERY, document_text(*BODIES[i]), float(i in (2, 4))) for i in (1, 2, 3, 4, 5, 6, 2, 4)]
    stats = fine_tune(model, pairs, RerankerParams(batch_size=4, seed=0))
    assert (stats["steps"], stats["pairs"]) == (2, 8)
    texts = [document_text(*BODIES[i]) for i in (1, 2)]
    directory = save_reranker(model, tmp_path / "ce", {"name": "ce", "training": stats})
    loaded = CrossEncoderReranker.load(directory)
    card = json.loads((directory / "card.json").read_text())
    assert loaded.model_id == card["model_id"] and card["model_id"].startswith("ce-")
    assert np.allclose(loaded.score(QUERY, texts), model.score(QUERY, texts), atol=1e-5)


def test_serving_adds_ltr_ce_only_when_the_reranker_exists(tmp_path: Path) -> None:
    from core.settings import RankSettings, Settings
    from rerank.pipeline import serving_stages
    from retrieval.vectors.embed import default_model_path
    from tests.unit.rerank.test_ltr import tiny_model

    model_dir = tiny_model().save(tmp_path / "ltr")
    off = serving_stages(Settings(rank=RankSettings(ltr_model=model_dir)))
    missing = serving_stages(Settings(rank=RankSettings(ltr_model=model_dir, reranker_model=tmp_path / "no")))
    on = serving_stages(
        Settings(
            rank=RankSettings(ltr_model=model_dir, reranker_model=default_model_path(), reranker_top_n=30)
        )
    )
    assert (list(off), list(missing), list(on)) == (["ltr"], ["ltr"], ["ltr", "ltr+ce"])
    stage = on["ltr+ce"]
    assert isinstance(stage, CrossEncoderStage)
    assert (stage.ltr, stage.top_n, stage.weight, stage.name) == (on["ltr"], 30, 0.2, "ltr+ce")


def test_a_folds_blend_weight_is_chosen_without_its_own_queries() -> None:
    from training.train_ltr import Split

    splits = [Split(0, ("c", "d"), ("a", "b")), Split(1, ("a", "b"), ("c", "d"))]
    # fold 0's own queries love the cross-encoder (w = 1); fold 1's prefer the LTR order.
    per_query = {
        0.0: {"a": {"ndcg@10": 0.1}, "b": {"ndcg@10": 0.1}, "c": {"ndcg@10": 0.6}, "d": {"ndcg@10": 0.6}},
        1.0: {"a": {"ndcg@10": 0.9}, "b": {"ndcg@10": 0.9}, "c": {"ndcg@10": 0.5}, "d": {"ndcg@10": 0.5}},
    }
    assert choose_weights(splits, per_query) == {0: 0.0, 1: 1.0}


def test_reranker_on_a_missing_gpu_is_a_load_error() -> None:
    import torch

    from core.errors import ModelLoadError
    from retrieval.vectors.embed import default_model_path

    if torch.cuda.is_available():
        loaded = CrossEncoderReranker.load(default_model_path(), seed=0, device="cuda")
        assert loaded.model.model.device.type == "cuda"
        return
    with pytest.raises(ModelLoadError, match="no CUDA device"):
        CrossEncoderReranker.load(default_model_path(), seed=0, device="cuda")


def test_reranker_scores_alike_on_cpu_and_auto(reranker: CrossEncoderReranker) -> None:
    from retrieval.vectors.embed import default_model_path

    texts = [document_text(t, b) for t, b in BODIES.values()]
    on_cpu = CrossEncoderReranker.load(default_model_path(), seed=0, device="cpu")
    assert on_cpu.model.model.device.type == "cpu"
    np.testing.assert_allclose(on_cpu.score(QUERY, texts), reranker.score(QUERY, texts), atol=1e-3)
