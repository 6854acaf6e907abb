"""Every JSON route refuses a query parameter it does not take (a misspelt ``pgae=2`` used to
be ignored everywhere but ``/v1/search``); web pages still take the ones links add."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.settings import Settings
from tests.fixtures.docs import numbered_index

ADMIN_KEY = "admin-key-for-tests"


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("unknown-params")
    index_dir = numbered_index(root / "index", ["alpha beta", "beta gamma", "gamma alpha"])
    settings = Settings.model_validate(
        {
            "api": {"crawl_data": str(root / "crawl"), "rate_limit_per_s": 0, "admin_api_key": ADMIN_KEY},
            "search": {"use_vectors": False},
        }
    )
    with TestClient(create_app(settings, index_dir=index_dir), raise_server_exceptions=False) as c:
        c.headers["X-API-Key"] = ADMIN_KEY
        yield c


def _json_routes(client: TestClient) -> list[tuple[str, str]]:
    schema = client.get("/openapi.json").json()
    return sorted(
        (path, method.upper()) for path, operations in schema["paths"].items() for method in operations
    )


def test_every_json_route_refuses_a_parameter_it_does_not_take(client: TestClient) -> None:
    routes = _json_routes(client)
    assert len(routes) >= 15  # the whole API, not an empty schema
    for path, method in routes:
        url = path.replace("{doc_id}", "1")
        answer = client.request(method, url, params={"pgae": "2"})
        assert answer.status_code == 400, (method, path, answer.status_code, answer.text)
        assert answer.json()["error"] == "bad_parameter"
        assert "'pgae'" in answer.json()["detail"], (method, path)


def test_the_message_names_what_the_route_takes(client: TestClient) -> None:
    assert client.get("/v1/hosts", params={"limt": "5"}).json()["detail"] == (
        "Unknown parameter 'limt'; expected one of: limit."
    )
    assert client.get("/healthz", params={"verbose": "1"}).json()["detail"] == (
        "Unknown parameter 'verbose'; it takes none."
    )
    search = client.get("/v1/search", params={"q": "alpha", "pgae": "2", "sise": "3"}).json()["detail"]
    assert search.startswith("Unknown parameter 'pgae', 'sise'; expected one of: ")
    for name in ("q", "page", "size", "cursor", "spell", "ranker"):
        assert name in search


def test_declared_parameters_still_work(client: TestClient) -> None:
    assert client.get("/v1/search", params={"q": "alpha", "page": "1", "size": "2"}).status_code == 200
    assert client.get("/v1/inspect", params={"url": "http://a.test/1"}).status_code == 200
    assert client.get("/v1/hosts").status_code == 200


def test_web_pages_take_parameters_that_links_add(client: TestClient) -> None:
    page = client.get("/", params={"q": "alpha", "utm_source": "newsletter"})
    assert page.status_code == 200
    assert "Page 0" in page.text or "Page 2" in page.text
