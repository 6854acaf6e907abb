"""Index and listing pages lose to the pages they list: real Python-docs pages, a real index.

Sphinx's ``genindex-F.html`` holds "f-string" as links to the pages that explain f-strings, and
"File and Directory Access" lists the modules that do the work; their main content is mostly
link text, so their BM25 is multiplied by their quality tier
(``retrieval.index.page_quality``). The same pages indexed without the link counts are the
peer: every other page scores exactly as there, the index page exactly its tier times that.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from core.settings import SearchSettings
from core.types import Document
from crawl.extraction.documents import page_document
from crawl.extraction.page import parse_html
from retrieval.index.build import build_index
from retrieval.index.page_quality import quality_of
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.docs import make_doc

DEMO = Path("/usr/share/doc/python3.11/html")
pytestmark = pytest.mark.skipif(not DEMO.exists(), reason="python3.11-doc is not installed")
PAGES = (
    "genindex-F.html",
    "library/filesys.html",
    "reference/lexical_analysis.html",
    "tutorial/inputoutput.html",
    "library/string.html",
    "library/os.html",
)
INDEX_PAGE = "http://docs.test/genindex-F.html"


def _documents() -> list[Document]:
    docs = []
    for path in PAGES:
        url = f"http://docs.test/{path}"
        page = parse_html((DEMO / path).read_text(encoding="utf-8"), url)
        docs.append(page_document(url, page, fetched_at=0.0, text_hash=path, fingerprint=0, max_links=1000))
    return docs


def _scores(index: Path, q: str) -> tuple[dict[str, float], dict[str, dict[str, object]]]:
    service = SearchService.open(index, SearchSettings(use_vectors=False, cache_entries=0))
    try:
        response = service.search(SearchRequest(q, ranker="bm25", size=10, explain=True))
    finally:
        service.close()
    return {h.url: h.score for h in response.hits}, {h.url: h.explain or {} for h in response.hits}


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    docs = _documents()
    rated = tmp_path_factory.mktemp("quality") / "index"
    build_index(docs, rated)
    unrated = tmp_path_factory.mktemp("no-quality") / "index"
    build_index([dataclasses.replace(d, link_words=0) for d in docs], unrated)
    return rated, unrated


def test_index_and_listing_pages_are_read_as_such_and_content_pages_are_not() -> None:
    quality = {d.url.removeprefix("http://docs.test/"): quality_of(d) for d in _documents()}
    assert quality["genindex-F.html"].score == 0.55 and quality["genindex-F.html"].link_density > 0.9
    assert quality["library/filesys.html"].score < 1.0  # "File and Directory Access": a list of modules
    for content in ("reference/lexical_analysis.html", "tutorial/inputoutput.html", "library/os.html"):
        assert quality[content].score == 1.0, content


def test_an_index_page_scores_its_tier_times_its_bm25_and_the_rest_as_before(
    indexes: tuple[Path, Path],
) -> None:
    rated, unrated = indexes
    with_quality, explain = _scores(rated, "f-string")
    without, _ = _scores(unrated, "f-string")
    assert INDEX_PAGE in without and INDEX_PAGE in with_quality
    assert with_quality[INDEX_PAGE] == pytest.approx(0.55 * without[INDEX_PAGE], rel=1e-5)
    for url, score in without.items():
        if url not in (INDEX_PAGE, "http://docs.test/library/filesys.html"):
            assert with_quality[url] == pytest.approx(score, rel=1e-6), url
    assert "links" in str(explain[INDEX_PAGE]["page_quality"])
    assert "page_quality" not in explain["http://docs.test/reference/lexical_analysis.html"]


def test_the_page_that_answers_comes_before_the_listing_that_names_it(indexes: tuple[Path, Path]) -> None:
    rated, unrated = indexes
    listing, answer = "http://docs.test/library/filesys.html", "http://docs.test/library/os.html"
    without, _ = _scores(unrated, "list files in directory")
    assert max(without, key=without.__getitem__) == listing  # "File and Directory Access" wins on words
    with_quality, _ = _scores(rated, "list files in directory")
    assert max(with_quality, key=with_quality.__getitem__) == answer
    # Gently: asked for by its own name, the listing still comes first.
    by_name, _ = _scores(rated, "file and directory access")
    assert max(by_name, key=by_name.__getitem__) == listing


def _ranked(index: Path, q: str, *, size: int, pages: int) -> list[tuple[str, float]]:
    service = SearchService.open(index, SearchSettings(use_vectors=False, cache_entries=0, spelling=False))
    try:
        out: list[tuple[str, float]] = []
        for page in range(1, pages + 1):
            response = service.search(SearchRequest(q, ranker="bm25", size=size, page=page))
            out.extend((h.url, h.score) for h in response.hits)
        return out
    finally:
        service.close()


def test_demoted_pages_take_their_exact_place_on_every_page_of_results(tmp_path: Path) -> None:
    # Forty pages about gardens, every third a listing whose words are all links (quality .55),
    # of varied lengths so their plain scores interleave with the others'.
    docs = [
        make_doc(
            f"http://garden.test/{i}",
            f"Garden notes {i}",
            " ".join(["garden roses pruning"] * (1 + i % 7) + ["soil compost mulch water"] * (5 + i % 5)),
        )
        for i in range(40)
    ]
    docs = [
        dataclasses.replace(d, link_words=len(d.body.split())) if i % 3 == 0 else d
        for i, d in enumerate(docs)
    ]
    build_index(docs, tmp_path / "rated")
    build_index([dataclasses.replace(d, link_words=0) for d in docs], tmp_path / "plain")
    plain = dict(_ranked(tmp_path / "plain", "garden roses", size=50, pages=1))
    quality = {d.url: quality_of(d).score for d in docs}
    expected = sorted(plain, key=lambda url: -plain[url] * quality[url])
    assert {quality[u] for u in expected} == {1.0, 0.55} and len(expected) == 40
    paged = _ranked(tmp_path / "rated", "garden roses", size=7, pages=6)
    assert [url for url, _ in paged] == expected
    for url, score in paged:
        assert score == pytest.approx(plain[url] * quality[url], rel=1e-6)
