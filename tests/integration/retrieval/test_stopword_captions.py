"""Short queries' stopwords are searched in titles and headings of a real Tantivy index.

On the Python docs "if statement" was "statement" and "if" found nothing: the index held
no stopwords. These tests fail on that code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.types import Document
from retrieval.index.build import build_index
from retrieval.index.lexical import LexicalShard
from retrieval.index.lexical_writer import build_lexical_shard
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.text.analyzer import parse_query
from tests.fixtures.docs import make_doc

COMPOUND = "https://docs.example/reference/compound_stmts.html"
SIMPLE = "https://docs.example/reference/simple_stmts.html"
EVENTS = "https://docs.example/library/asyncio-eventloop.html"
CONTROL = "https://docs.example/tutorial/controlflow.html"

PAGES: tuple[Document, ...] = (
    make_doc(
        COMPOUND,
        "Compound statements",
        "Compound statements contain groups of other statements. A clause header begins with a "
        "keyword and ends with a colon.",
        headings=("The if statement", "The while statement", "The with statement"),
    ),
    make_doc(
        SIMPLE,
        "Simple statements",
        "A simple statement is comprised within a single logical line. Several simple statements "
        "may occur on a single line. The statement list of simple statements and statement forms.",
        headings=("Expression statements", "Assignment statements", "The pass statement"),
    ),
    make_doc(
        EVENTS,
        "Event Loop",
        "The event loop is the core of every asyncio application. The loop runs tasks; loop.stop "
        "stops the loop, loop.close closes the loop, and a loop can run forever.",
        headings=("Running and stopping the loop", "Scheduling callbacks"),
    ),
    make_doc(
        CONTROL,
        "More Control Flow Tools",
        "Python knows the usual control flow statements. Loops iterate over the items of a "
        "sequence in the order that they appear.",
        headings=("if Statements", "for Statements", "break and continue Statements"),
    ),
)


@pytest.fixture(scope="module")
def shard(tmp_path_factory: pytest.TempPathFactory) -> LexicalShard:
    path = tmp_path_factory.mktemp("captions") / "lexical"
    build_lexical_shard(PAGES, path)
    return LexicalShard(path)


def urls(shard: LexicalShard, raw: str) -> list[str]:
    hits = shard.search(parse_query(raw), k=10).hits
    stored = shard.stored_many([h.doc_id for h in hits])
    return [stored[h.doc_id].url for h in hits]


def test_a_keyword_heading_ranks_first_for_a_short_query(shard: LexicalShard) -> None:
    # Without its stopword "if statement" is "statement", which SIMPLE repeats most.
    assert urls(shard, "if statement")[0] in {COMPOUND, CONTROL}
    assert urls(shard, "with statement")[0] == COMPOUND


def test_a_query_of_one_stopword_finds_the_pages_with_it_in_a_heading(shard: LexicalShard) -> None:
    assert set(urls(shard, "if")) == {COMPOUND, CONTROL}
    assert urls(shard, "while") == [COMPOUND]


def test_the_word_pair_outweighs_the_lone_stopword(shard: LexicalShard) -> None:
    # CONTROL has "for" in a heading, next to "statements", not "loop": the pair decides.
    assert urls(shard, "for statements")[0] == CONTROL


def test_a_long_query_scores_as_if_its_stopwords_were_not_there(shard: LexicalShard) -> None:
    long = shard.search(parse_query("what is the event loop of the asyncio library"), k=10).hits
    bare = shard.search(parse_query("event loop asyncio library"), k=10).hits
    assert [(h.doc_id, h.score) for h in long] == [(h.doc_id, pytest.approx(h.score)) for h in bare]


def test_titles_and_headings_only_not_the_body(shard: LexicalShard) -> None:
    # "can" (a stopword) is in EVENTS' body, never in a title or heading.
    assert urls(shard, "can") == []


@pytest.mark.parametrize("query", ["if statement", "for loop", "the with statement", "if", "and or not"])
def test_sharded_scores_equal_one_index(tmp_path: Path, query: str) -> None:
    build_index(PAGES, tmp_path / "one", shards=1)
    build_index(PAGES, tmp_path / "two", shards=2)
    single = SearchService.open(tmp_path / "one").search(SearchRequest(query, size=10, ranker="bm25"))
    merged = SearchService.open(tmp_path / "two").search(SearchRequest(query, size=10, ranker="bm25"))
    assert merged.total == single.total
    assert [h.doc_id for h in merged.hits] == [h.doc_id for h in single.hits]
    for a, b in zip(merged.hits, single.hits, strict=True):
        assert a.score == pytest.approx(b.score, rel=1e-4)


def test_explain_shows_what_the_stopwords_added(tmp_path: Path) -> None:
    from retrieval.query.explain import bm25_breakdown

    build_index(PAGES, tmp_path / "idx", shards=2)
    service = SearchService.open(tmp_path / "idx")
    response = service.search(SearchRequest("with statement", size=10, ranker="bm25", explain=True))
    hit = response.hits[0]
    assert hit.explain is not None
    shard = int(hit.explain["shard"])
    breakdown = bm25_breakdown(service.generation.broker, response.query, hit.doc_id, shard)
    assert breakdown["with"]["captions"] > 0
    assert breakdown['"with statement"']["captions"] > 0
    # The cells add up to the score the ranker used, the captions part included.
    total = sum(score for cells in breakdown.values() for score in cells.values())
    assert total == pytest.approx(hit.explain["bm25"], rel=1e-3)


def test_a_typo_beside_a_stopword_is_still_corrected(tmp_path: Path) -> None:
    # "if statment" finds the pages with "if" in a heading (more than the rewrite threshold
    # of 3), but none has the word typed: the correction is served, as for no results.
    more = (
        make_doc("https://docs.example/faq.html", "FAQ", "Questions.", headings=("What if a key is gone",)),
        make_doc("https://docs.example/howto.html", "HOWTO", "Recipes.", headings=("if and elif",)),
    )
    build_index((*PAGES, *more), tmp_path / "idx", shards=1)
    service = SearchService.open(tmp_path / "idx")
    assert service.search(SearchRequest("if", ranker="bm25", spell=False)).total >= 3
    response = service.search(SearchRequest("if statment", ranker="bm25"))
    assert response.rewritten_from == "if statment"
    assert [h.url for h in response.hits][:1] == [COMPOUND]
    # A query whose words are in the index is never rewritten.
    assert service.search(SearchRequest("if statements", ranker="bm25")).rewritten_from is None
