"""Compound spellings through the served path: "default dict" finds the ``defaultdict`` page first.

A real index whose vocabulary holds ``defaultdict``; its pages never say "default dict", so
without the compound variant they do not match at all and pages that merely hold both words
come first (``search.compounds`` off shows it). The explain page names
what was also searched.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from core.settings import SearchSettings, Settings
from retrieval.index.build import build_index
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.conftest import ServerThread
from tests.fixtures.docs import make_doc

DOCS = [
    make_doc(
        "https://docs.test/collections",
        "collections",
        "The defaultdict type calls a factory for missing keys.",
    ),
    make_doc("https://docs.test/counter", "Counter", "A defaultdict of ints counts; see collections."),
    *(
        make_doc(
            f"https://docs.test/api{i}",
            f"API {i}",
            "The default value of a dict argument. " + "Other parameters are described below. " * 8,
        )
        for i in range(4)
    ),
    make_doc("https://docs.test/data", "Data model", "Every class has a data attribute; a class with data."),
]


WITH_COMPOUND = {"https://docs.test/collections", "https://docs.test/counter"}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compounds") / "index"
    build_index(DOCS, root)
    return root


def _first(index: Path, q: str, *, compounds: bool) -> tuple[str, tuple[tuple[str, float], ...]]:
    service = SearchService.open(
        index, SearchSettings(use_vectors=False, cache_entries=0, compounds=compounds)
    )
    try:
        response = service.search(SearchRequest(q, ranker="bm25"))
    finally:
        service.close()
    return response.hits[0].url, response.query.expansions


def test_a_compound_the_index_holds_is_searched_beside_the_typed_words(index: Path) -> None:
    assert _first(index, "default dict", compounds=False) == ("https://docs.test/api0", ())
    url, added = _first(index, "default dict", compounds=True)
    assert url in WITH_COMPOUND and added == (("defaultdict", 1.0),)
    assert _first(index, "default-dict", compounds=True)[0] in WITH_COMPOUND


@pytest.fixture(scope="module")
def server(index: Path) -> Iterator[ServerThread]:
    settings = Settings.model_validate({"api": {"rate_limit_per_s": 0}, "search": {"use_vectors": False}})
    with ServerThread(create_app(settings, index_dir=index)) as running:
        yield running


def test_explain_names_what_was_also_searched(server: ServerThread) -> None:
    found = httpx.get(server.url + "/v1/search", params={"q": "default dict", "ranker": "bm25"}).json()
    first = found["results"][0]
    assert first["url"] in WITH_COMPOUND
    params = {"q": "default dict", "ranker": "bm25", "doc_id": first["doc_id"]}
    page = httpx.get(server.url + "/explain", params=params)
    assert page.status_code == 200
    assert 'id="also-searched">Also searched: defaultdict' in page.text
