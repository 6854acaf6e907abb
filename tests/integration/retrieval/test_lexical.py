"""A real Tantivy index on disk, searched the way the service searches it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ManifestError, QueryError
from core.settings import SearchSettings
from retrieval.index.build import build_index
from retrieval.index.lexical import LexicalShard
from retrieval.index.lexical_writer import build_lexical_shard
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.text.analyzer import parse_query
from tests.fixtures.docs import SMALL_WEB


@pytest.fixture(scope="module")
def shard(tmp_path_factory: pytest.TempPathFactory) -> LexicalShard:
    path = tmp_path_factory.mktemp("lex") / "lexical"
    assert build_lexical_shard(SMALL_WEB, path) == len(SMALL_WEB)
    return LexicalShard(path)


def urls(shard: LexicalShard, raw: str, k: int = 10) -> list[str]:
    hits = shard.search(parse_query(raw), k=k).hits
    stored = shard.stored_many([h.doc_id for h in hits])
    return [stored[h.doc_id].url for h in hits]


def test_title_match_outranks_body_only_match(shard: LexicalShard) -> None:
    assert urls(shard, "generators")[0] == "https://wiki.python.org/moin/Generators"


def test_phrase_must_match_in_order(shard: LexicalShard) -> None:
    got = set(urls(shard, '"list comprehension"'))
    assert got == {
        "https://docs.python.org/3/tutorial/datastructures.html",
        "https://wiki.python.org/moin/Generators",
        "https://example.de/liste.html",
    }
    assert "https://example.org/report.pdf" not in got  # has both words, not the phrase


def test_exclusion_removes_documents(shard: LexicalShard) -> None:
    assert "https://wiki.python.org/moin/Generators" in urls(shard, "comprehension")
    assert "https://wiki.python.org/moin/Generators" not in urls(shard, "comprehension -lazy")


def test_site_matches_host_and_subdomains(shard: LexicalShard) -> None:
    assert set(urls(shard, "comprehension site:python.org")) == {
        "https://docs.python.org/3/tutorial/datastructures.html",
        "https://wiki.python.org/moin/Generators",
    }
    assert urls(shard, "comprehension site:docs.python.org") == [
        "https://docs.python.org/3/tutorial/datastructures.html"
    ]


def test_lang_and_filetype_filters(shard: LexicalShard) -> None:
    assert urls(shard, "list lang:de") == ["https://example.de/liste.html"]
    assert urls(shard, "list filetype:pdf") == ["https://example.org/report.pdf"]


def test_filter_only_query_lists_the_site(shard: LexicalShard) -> None:
    assert len(urls(shard, "site:example.org")) == 3


def test_filters_scores_do_not_change_ranking(shard: LexicalShard) -> None:
    plain = shard.search(parse_query("list"), k=10).hits
    filtered = shard.search(parse_query("list site:python.org"), k=10).hits
    plain_scores = {h.doc_id: h.score for h in plain}
    assert filtered and all(abs(plain_scores[h.doc_id] - h.score) < 1e-4 for h in filtered)


def test_repeated_query_word_weighs_more(shard: LexicalShard) -> None:
    once = {h.doc_id: h.score for h in shard.search(parse_query("lists bread"), k=10).hits}
    twice = {h.doc_id: h.score for h in shard.search(parse_query("lists lists bread"), k=10).hits}
    lists_doc = next(d for d in SMALL_WEB if d.url.endswith("lists-lists")).doc_id
    bread_doc = next(d for d in SMALL_WEB if d.url.endswith("bread.html")).doc_id
    assert twice[lists_doc] > once[lists_doc]
    assert twice[bread_doc] == pytest.approx(once[bread_doc])


def test_filter_doc_ids_applies_query_filters(shard: LexicalShard) -> None:
    ids = [d.doc_id for d in SMALL_WEB]
    kept = shard.filter_doc_ids(parse_query("x site:example.org -dough"), ids)
    assert {d.url for d in SMALL_WEB if d.doc_id in kept} == {
        "https://example.org/report.pdf",
        "https://example.org/lists-lists",
    }


def test_field_scores_split_bm25_by_field(shard: LexicalShard) -> None:
    doc = next(d for d in SMALL_WEB if "datastructures" in d.url)
    scores = shard.field_scores(parse_query("comprehensions lists"), [doc.doc_id])
    assert scores["headings"][doc.doc_id] > 0 and scores["body"][doc.doc_id] > 0
    assert doc.doc_id not in scores["anchors"]


def test_stored_document_round_trip(shard: LexicalShard) -> None:
    doc = SMALL_WEB[3]
    stored = shard.stored(doc.doc_id)
    assert stored is not None
    assert (stored.url, stored.title, stored.body, stored.host) == (doc.url, doc.title, doc.body, doc.host)


def test_stored_many_reads_remembered_hits_and_searches_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "lexical"
    build_lexical_shard(SMALL_WEB, path)
    fresh = LexicalShard(path)  # nothing remembered: every document found by its doc_id
    hits = fresh.search(parse_query("list"), k=3).hits
    others = [d.doc_id for d in SMALL_WEB if d.doc_id not in {h.doc_id for h in hits}][:2]
    asked = [hits[0].doc_id, *others, *(h.doc_id for h in hits[1:]), 10**9]
    got = fresh.stored_many(asked)
    assert set(got) == set(asked) - {10**9}  # an id the shard lacks is left out
    reference = LexicalShard(path)
    for doc_id, doc in got.items():
        assert doc == reference.stored(doc_id)
        assert doc.doc_id == doc_id


def test_address_memo_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import retrieval.index.lexical as lexical

    monkeypatch.setattr(lexical, "ADDRESS_MEMO_DOCS", 4)
    path = tmp_path / "lexical"
    build_lexical_shard(SMALL_WEB, path)
    shard = LexicalShard(path)
    for raw in ("list", "comprehension", "bread", "generators"):
        hits = shard.search(parse_query(raw), k=3).hits
        assert len(shard._addresses) <= 4
        stored = shard.stored_many([h.doc_id for h in hits])
        assert [stored[h.doc_id].doc_id for h in hits] == [h.doc_id for h in hits]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=120))
def test_any_query_text_searches_without_error(shard: LexicalShard, raw: str) -> None:
    try:
        query = parse_query(raw)
    except QueryError:
        return
    result = shard.search(query, k=5)
    assert result.total >= len(result.hits)


def test_paging_is_consistent(tmp_path: Path) -> None:
    build_index(SMALL_WEB, tmp_path / "idx", shards=2)
    # Pages agree on the complete ranked list. The default 1 s deadline is a serving
    # budget: a shard late for it on a loaded machine is left out of that one answer
    # (partial, by design), a different list, which failed this test on CI.
    service = SearchService.open(tmp_path / "idx", SearchSettings(deadline_s=60.0))
    everything = service.search(SearchRequest("list lists comprehension", page=1, size=10))
    pages = [service.search(SearchRequest("list lists comprehension", page=p, size=2)) for p in (1, 2, 3)]
    assert not any(r.partial for r in (everything, *pages))
    paged = [h.doc_id for page in pages for h in page.hits]
    assert paged == [h.doc_id for h in everything.hits][:6]
    assert all(p.total == everything.total for p in pages)


def test_page_size_is_capped(tmp_path: Path) -> None:
    build_index(SMALL_WEB, tmp_path / "idx")
    service = SearchService.open(tmp_path / "idx")
    with pytest.raises(QueryError, match="size=51 is out of range; use 1 to 50."):
        service.search(SearchRequest("list", size=51))


def test_missing_index_has_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="is not a Trawl index"):
        SearchService.open(tmp_path)
