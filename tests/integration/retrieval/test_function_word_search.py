"""A German, Spanish or French reader's short query finds the section it names in a real index.

Three chapters of the Debian Reference in four languages, parsed as the crawler parses them. Read
in the reader's language, a query's function words ("für", "con el", "pour") are searched in
titles and headings and beside their neighbours, as an English query's stopwords are; searched as
words like any other they favoured the chapter that repeats them most (these tests fail on that).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest

from core.settings import Settings
from core.types import Document, Hit
from crawl.extraction.documents import page_document
from crawl.extraction.page import parse_html
from retrieval.index.build import build_index
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from training.evaluate import evaluate

BOOK = Path("/usr/share/debian-reference")
PAGES = tuple(f"{c}.{lang}.html" for c in ("ch01", "ch02", "ch09") for lang in ("en", "de", "es", "fr"))
pytestmark = pytest.mark.skipif(
    not all((BOOK / p).exists() for p in PAGES), reason="debian-reference-{en,de,es,fr} are not installed"
)


def _document(name: str) -> Document:
    url = f"http://book.test/{name}"
    page = parse_html((BOOK / name).read_text(encoding="utf-8"), url)
    return page_document(url, page, fetched_at=0.0, text_hash=name, fingerprint=0, max_links=100)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> SearchService:
    index = tmp_path_factory.mktemp("book") / "index"
    build_index([_document(p) for p in PAGES], index)
    return SearchService.open(index)


def first(service: SearchService, text: str, reader: str | None) -> str:
    response = service.search(SearchRequest(text, ranker="bm25", reader_lang=reader, spell=False))
    return response.hits[0].url.rsplit("/", 1)[-1]


@pytest.mark.parametrize(
    ("text", "reader", "page"),
    [
        ("Optionen für", "de", "ch02.de.html"),  # 2.2.2 "Optionen für aptitude"
        ("Operaciones con el", "es", "ch01.es.html"),  # 1.4.8 "Operaciones con el sistema de archivos"
        ("Astuces pour", "fr", "ch02.fr.html"),  # 2.6 "Astuces pour la gestion des paquets Debian"
        ("Contrôle des", "fr", "ch01.fr.html"),  # 1.2.3 "Contrôle des accès aux fichiers"
    ],
)
def test_the_readers_language_finds_the_heading_page(
    service: SearchService, text: str, reader: str, page: str
) -> None:
    assert first(service, text, reader) == page
    assert first(service, f"{text} lang:{reader}", None) == page  # lang: reads it the same way
    assert first(service, text, None) != page  # read as English words, another chapter won


def test_an_english_readers_query_is_searched_as_before(service: SearchService) -> None:
    for text in ("Tips for", "Options for aptitude", "Astuces pour"):
        english = service.search(SearchRequest(text, ranker="bm25", reader_lang="en", spell=False))
        unread = service.search(SearchRequest(text, ranker="bm25", reader_lang=None, spell=False))
        assert [(h.doc_id, h.score) for h in english.hits] == [(h.doc_id, h.score) for h in unread.hits]


def test_trawl_eval_reads_each_query_in_its_metadata_language(tmp_path: Path) -> None:
    data = tmp_path / "set"
    (data / "qrels").mkdir(parents=True)
    records = []
    for name in PAGES:
        doc = _document(name)
        records.append(
            {"_id": name, "title": doc.title, "text": doc.body, "metadata": {"headings": doc.headings}}
        )
    (data / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    queries = [("q1", "Astuces pour", "fr"), ("q2", "Contrôle des", "fr"), ("q3", "Astuces pour", "")]
    (data / "queries.jsonl").write_text(
        "".join(
            json.dumps({"_id": q, "text": t, "metadata": {"lang": lang}}) + "\n" for q, t, lang in queries
        ),
        encoding="utf-8",
    )
    qrels = "query-id\tcorpus-id\tscore\nq1\tch02.fr.html\t1\nq2\tch01.fr.html\t1\nq3\tch02.fr.html\t1\n"
    (data / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    result = evaluate(data, "bm25", settings=Settings(data_dir=tmp_path / "data"))
    assert result.run["q1"][0] == "ch02.fr.html" and result.run["q2"][0] == "ch01.fr.html"
    assert result.run["q3"][0] != "ch02.fr.html"  # no language: read as English words


def marks(hits: Sequence[Hit]) -> set[str]:
    """The highlighted words of the hits' snippets, folded."""
    return {m.casefold() for hit in hits for m in re.findall(r"<mark>(.*?)</mark>", hit.snippet)}


def test_a_readers_function_words_are_not_highlighted(service: SearchService) -> None:
    read = service.search(SearchRequest("pour APT", ranker="bm25", reader_lang="fr")).hits
    assert "apt" in marks(read) and "pour" not in marks(read)
    english = service.search(SearchRequest("pour APT", ranker="bm25", reader_lang=None)).hits
    assert "pour" in marks(english)


def test_explain_puts_a_readers_function_word_in_the_captions_only(service: SearchService) -> None:
    from retrieval.query.explain import bm25_breakdown  # lazy: as the explain route loads it

    response = service.search(SearchRequest("Astuces pour", ranker="bm25", reader_lang="fr", explain=True))
    hit = response.hits[0]
    assert hit.explain is not None
    breakdown = bm25_breakdown(
        service.generation.broker, response.query, hit.doc_id, int(hit.explain["shard"])
    )
    assert set(breakdown["pour"]) == {"captions"} and breakdown['"astuc pour"']["captions"] > 0
    assert "body" in breakdown["Astuces"]
    total = sum(score for cells in breakdown.values() for score in cells.values())
    assert total == pytest.approx(hit.explain["bm25"], rel=1e-3)


def test_a_cursor_pages_through_the_list_as_its_first_page_read_it(service: SearchService) -> None:
    whole = service.search(
        SearchRequest("Astuces pour", ranker="bm25", reader_lang="fr", size=4, spell=False)
    )
    first = service.search(
        SearchRequest("Astuces pour", ranker="bm25", reader_lang="fr", size=2, spell=False)
    )
    assert first.next_cursor is not None
    # Followed by a request whose Accept-Language says English: still read in French.
    second = service.search(SearchRequest(cursor=first.next_cursor, reader_lang="en", spell=False))
    assert [h.doc_id for h in (*first.hits, *second.hits)] == [h.doc_id for h in whole.hits]
    assert second.query.read_as == "fr"
