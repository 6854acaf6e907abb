"""hybrid fuses the English model's vectors only into queries that model reads (DECISIONS 80)."""

from __future__ import annotations

from core.types import DocId
from retrieval.query.hybrid import Candidate
from retrieval.query.ranking import ConvexStage, RankContext
from retrieval.text.analyzer import parse_query
from retrieval.text.function_words import read_in

LEXICAL = Candidate(DocId(1), 0, 9.0, 0.10, 1, 2)
"""The better BM25 match, far from the query's vector."""
SEMANTIC = Candidate(DocId(2), 0, 1.0, 0.90, 2, 1)
"""The closer vector, a weak BM25 match."""


def _first(query_text: str, reader: str | None = None) -> DocId:
    query = read_in(parse_query(query_text), reader)
    stage = ConvexStage(weight=0.9)
    context = RankContext(fetch=lambda ids: {})
    return stage.rank(query, [LEXICAL, SEMANTIC], explain=False, context=context).ranked[0].doc_id


def test_an_english_query_is_fused_as_before() -> None:
    assert _first("package configuration") == SEMANTIC.doc_id
    assert _first("package configuration", "en") == SEMANTIC.doc_id


def test_a_cjk_query_or_one_read_in_another_language_ranks_by_bm25_alone() -> None:
    assert _first("软件包配置") == LEXICAL.doc_id
    assert _first("パッケージ設定", "ja") == LEXICAL.doc_id
    assert _first("Astuces pour", "fr") == LEXICAL.doc_id
    assert _first("Astuces pour") == SEMANTIC.doc_id  # no reader language: read as English


def test_explain_says_the_weight_used() -> None:
    query = read_in(parse_query("Optionen für aptitude"), "de")
    out = ConvexStage(weight=0.9).rank(
        query, [LEXICAL, SEMANTIC], explain=True, context=RankContext(lambda ids: {})
    )
    assert {info["cosine_weight"] for info in out.explain.values()} == {0.0}
