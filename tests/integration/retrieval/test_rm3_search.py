"""RM3 through the served path: a real two-shard index, the expansion reaching every shard."""

from __future__ import annotations

import pytest

from core.settings import SearchSettings
from retrieval.index.build import build_index
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.docs import make_doc

# Five pages about wings that all say "airfoil", one that says "airfoil" but never
# "wing", and unrelated filler so the statistics look like a collection's.
WINGS = [
    make_doc(
        f"https://aero.example/wing{i}.html",
        f"Wing section {i}",
        f"The wing uses an airfoil with camber; airfoil lift and airfoil drag of wing {i}.",
    )
    for i in range(5)
]
AIRFOIL_ONLY = make_doc(
    "https://aero.example/profiles.html",
    "Profiles",
    "A catalogue of airfoil profiles: airfoil thickness, airfoil camber, airfoil data tables.",
)
FILLER = [
    make_doc(f"https://misc.example/p{i}.html", f"Note {i}", f"gardening soil compost season {i} tomatoes")
    for i in range(20)
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> SearchService:
    root = tmp_path_factory.mktemp("rm3") / "idx"
    build_index([*WINGS, AIRFOIL_ONLY, *FILLER], root, shards=2)
    return SearchService.open(root, SearchSettings(use_vectors=False, deadline_s=60.0))


def test_expansion_finds_the_page_that_shares_the_topic_but_not_the_word(service: SearchService) -> None:
    plain = service.search(SearchRequest("wing", ranker="bm25", size=20))
    expanded = service.search(SearchRequest("wing", ranker="bm25-rm3", size=20))
    assert AIRFOIL_ONLY.url not in {h.url for h in plain.hits}
    urls = [h.url for h in expanded.hits]
    assert AIRFOIL_ONLY.url in urls
    # The query's own matches still come first, and nothing unrelated is pulled in.
    assert set(urls[:5]) == {d.url for d in WINGS}
    assert not any("misc.example" in u for u in urls)
    assert expanded.ranker == "bm25-rm3" and not expanded.partial


def test_snippets_mark_the_users_words_not_the_expansion(service: SearchService) -> None:
    hit = next(
        h
        for h in service.search(SearchRequest("wing", ranker="bm25-rm3", size=20)).hits
        if h.url == AIRFOIL_ONLY.url
    )
    assert "<mark>" not in hit.snippet


def test_a_query_nothing_matches_stays_empty(service: SearchService) -> None:
    assert service.search(SearchRequest("zeppelin", ranker="bm25-rm3")).hits == ()
