"""Warming a generation builds what a first query would otherwise pay for."""

from __future__ import annotations

from pathlib import Path

from core.settings import SearchSettings
from retrieval.index.build import build_index
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.docs import SMALL_WEB


def test_warm_builds_the_speller_so_the_first_query_does_not(tmp_path: Path) -> None:
    build_index(SMALL_WEB, tmp_path / "index")
    service = SearchService.open(tmp_path / "index", SearchSettings())
    try:
        generation = service.generation
        assert generation.id not in service.spelling.spellers._spellers
        service.warm(generation)
        built = service.spelling.spellers._spellers[generation.id]
        assert built is not None
        service.search(SearchRequest("comprehensoins"))  # the misspelling is served by the warmed speller
        assert service.spelling.spellers._spellers[generation.id] is built
    finally:
        service.close()
