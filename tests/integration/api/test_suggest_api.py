"""Search as you type and the OpenSearch description, over HTTP on a real index root."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from core.settings import Settings
from retrieval.index.root import IndexRoot
from tests.conftest import ServerThread
from tests.fixtures.docs import SMALL_WEB, make_doc

OPENSEARCH = "{http://a9.com/-/spec/opensearch/1.1/}"
SETTLE_S = 60.0
"""Bound on waiting for a background build to end (it ends in well under a second here)."""


class Served:
    def __init__(self, running: ServerThread, root: IndexRoot, app: object) -> None:
        self.running = running
        self.root = root
        self.app = app


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("suggest")
    root = IndexRoot(tmp / "index")
    root.publish(root.build(list(SMALL_WEB), shards=2))
    settings = Settings.model_validate(
        {
            "data_dir": str(tmp / "data"),
            "api": {"crawl_data": str(tmp / "crawl"), "rate_limit_per_s": 0},
            "search": {"use_vectors": False},
        }
    )
    app = create_app(settings, index_dir=Path(root.root))
    with ServerThread(app) as running:
        yield Served(running, root, app)


@pytest.fixture
def client(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.running.url, timeout=30) as c:
        yield c


def texts(client: httpx.Client, q: str, **params: str) -> list[str]:
    answer = client.get("/v1/suggest", params={"q": q, **params})
    assert answer.status_code == 200, answer.text
    return [s["text"] for s in answer.json()["suggestions"]]


def test_the_suggester_is_built_as_the_service_starts(served: Served) -> None:
    """Before any keystroke: the first one must not pay for the build."""
    cache = served.app.state.suggest  # made by the lifespan, not by a request
    assert cache.settle(60)
    assert cache.get(served.app.state.search.generations) is not None


def test_suggestions_complete_titles_and_headings(client: httpx.Client) -> None:
    answer = client.get("/v1/suggest", params={"q": "list c"})
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert body["query"] == "list c"
    assert body["suggestions"][0] == {
        "text": "List Comprehensions",
        "kind": "heading",
        "url": "https://docs.python.org/3/tutorial/datastructures.html",
    }
    assert texts(client, "gener")[0] == "Generators"
    assert texts(client, "genrat")[0] == "Generators"  # one typo in the last word
    assert texts(client, "zzzz") == []
    assert texts(client, "") == []


def test_size_bounds_the_answer(client: httpx.Client) -> None:
    assert len(texts(client, "l", size="1")) == 1
    assert len(texts(client, "l", size="20")) <= 20


@pytest.mark.parametrize(
    "params",
    [
        {"q": "li", "size": "0"},
        {"q": "li", "size": "21"},
        {"q": "li", "size": "+5"},
        {"q": "li", "format": "xml"},
        {"q": "li", "sise": "3"},
        {"q": "x" * 501},
        {},
    ],
)
def test_bad_parameters_are_refused(client: httpx.Client, params: dict[str, str]) -> None:
    answer = client.get("/v1/suggest", params=params)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] in ("bad_parameter", "bad_query")
    assert client.get("/opensearch.xml", params={"q": "x"}).status_code == 400


def test_opensearch_suggestions_are_what_browsers_read(client: httpx.Client) -> None:
    answer = client.get("/v1/suggest", params={"q": "li", "format": "opensearch"})
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/x-suggestions+json"
    query, completions = answer.json()
    assert query == "li"
    assert completions == texts(client, "li")
    assert "List Comprehensions" in completions


def test_opensearch_description_names_search_and_suggestions(client: httpx.Client, served: Served) -> None:
    answer = client.get("/opensearch.xml")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/opensearchdescription+xml")
    doc = ET.fromstring(answer.content)
    assert doc.tag == f"{OPENSEARCH}OpenSearchDescription"
    assert doc.findtext(f"{OPENSEARCH}ShortName") == "Trawl"
    urls = {u.get("type"): u.get("template") for u in doc.findall(f"{OPENSEARCH}Url")}
    base = served.running.url
    assert urls["text/html"] == f"{base}/?q={{searchTerms}}"
    assert urls["application/x-suggestions+json"] == f"{base}/v1/suggest?q={{searchTerms}}&format=opensearch"
    assert urls["application/opensearchdescription+xml"] == f"{base}/opensearch.xml"
    filled = urls["application/x-suggestions+json"].replace("{searchTerms}", "gen")
    assert client.get(filled).json()[1][0] == "Generators"
    assert client.get(urls["text/html"].replace("{searchTerms}", "generators")).status_code == 200


def test_a_publish_is_followed_and_frequent_queries_are_offered(client: httpx.Client, served: Served) -> None:
    for visitor in ("v1", "v2", "v3"):
        found = client.get("/v1/search", params={"q": "lambda functions"}, headers={"X-Trawl-User": visitor})
        assert found.status_code == 200 and found.json()["total"] > 0
    served.app.state.experiments.logs.flush()  # type: ignore[attr-defined]
    assert texts(client, "sourd") == []
    docs = [*SMALL_WEB, make_doc("https://bake.test/sourdough", "Sourdough starter", "Flour and water.")]
    served.root.publish(served.root.build(docs, shards=2))
    texts(client, "sourd")  # the new generation's build starts; the old one answers meanwhile
    assert served.app.state.suggest.settle(SETTLE_S)  # type: ignore[attr-defined]
    assert texts(client, "sourd") == ["Sourdough starter"]
    answer = client.get("/v1/suggest", params={"q": "lamb"}).json()
    assert {"text": "lambda functions", "kind": "query", "url": None} in answer["suggestions"]
