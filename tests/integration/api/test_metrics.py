"""``GET /metrics`` counts exactly the requests and searches that were made, by route and entry."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from api.app import create_app
from core.settings import Settings
from retrieval.index.build import build_index
from tests.conftest import ServerThread
from tests.fixtures.docs import SMALL_WEB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    index = tmp_path_factory.mktemp("metrics") / "index"
    build_index(SMALL_WEB, index)
    with ServerThread(create_app(Settings(), index_dir=index)) as running:
        yield running


def _samples(client: httpx.Client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = client.get("/metrics").text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _delta(before: dict, after: dict, name: str, **labels: str) -> float:
    """Sum over series of ``name`` whose labels include ``labels``, after minus before."""

    def total(samples: dict) -> float:
        wanted = set(labels.items())
        return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)

    return total(after) - total(before)


def test_metrics_count_api_and_page_searches_and_errors(server: ServerThread) -> None:
    n_api, m_page, k_errors = 5, 3, 4
    with httpx.Client(base_url=server.url, timeout=10) as client:
        client.get("/v1/search", params={"q": "warmup"})  # the ranker label is whatever serves
        before = _samples(client)
        for i in range(n_api):
            assert client.get("/v1/search", params={"q": f"list comprehension {i}"}).status_code == 200
        for _ in range(m_page):
            assert client.get("/", params={"q": "zzzunmatchedword"}).status_code == 200
        for _ in range(k_errors):
            assert client.get("/v1/search", params={"q": ""}).status_code == 400
        after = _samples(client)

    def delta(name: str, **labels: str) -> float:
        return _delta(before, after, name, **labels)

    assert delta("trawl_http_requests_total", route="/v1/search", status="200") == n_api
    assert delta("trawl_http_requests_total", route="/v1/search", status="400") == k_errors
    assert delta("trawl_http_requests_total", route="/", status="200") == m_page
    assert delta("trawl_http_requests_total", route="/metrics", status="200") == 1  # the first scrape
    assert delta("trawl_queries_total", entry="api") == n_api
    assert delta("trawl_queries_total", entry="web") == m_page
    assert delta("trawl_query_seconds_count", entry="api") == n_api
    assert delta("trawl_query_seconds_count", entry="web") == m_page
    assert delta("trawl_zero_result_queries_total", entry="web") == m_page
    assert delta("trawl_http_request_seconds_count", route="/v1/search") == n_api + k_errors
    rankers = {dict(ls)["ranker"] for (n, ls) in after if n == "trawl_queries_total"}
    assert rankers and "" not in rankers


def test_unknown_paths_share_one_series(server: ServerThread) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        before = _samples(client)
        for path in ("/nope", "/nope/2", "/x?y=1"):
            assert client.get(path).status_code == 404
        after = _samples(client)
    assert _delta(before, after, "trawl_http_requests_total", route="unmatched", status="404") == 3
