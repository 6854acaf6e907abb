"""The API on a real index, queried over HTTP on 127.0.0.1."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import pytest

from api.app import create_app
from core.settings import Settings
from retrieval.index.build import build_index
from tests.conftest import ServerThread
from tests.fixtures.docs import SMALL_WEB


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    index = tmp_path_factory.mktemp("api") / "index"
    build_index(SMALL_WEB, index, shards=2)
    # One module-wide client sends all 79 tests' requests: on a fast machine they pass the
    # default 50/s budget and get 429s. The limiter has its own tests (test_protection.py).
    settings = Settings()
    settings = settings.model_copy(update={"api": settings.api.model_copy(update={"rate_limit_per_s": 0.0})})
    app = create_app(settings, index_dir=index)
    with ServerThread(app) as running:
        yield running


@pytest.fixture
def client(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


def test_search_returns_ranked_highlighted_results(client: httpx.Client) -> None:
    r = client.get("/v1/search", params={"q": '"list comprehension" -lazy', "size": 5})
    assert r.status_code == 200
    body = r.json()
    assert set(body) >= {"query", "total", "page", "took_ms", "results"}
    assert body["total"] == 2 and body["page"] == 1
    assert [x["url"] for x in body["results"]][0] == "https://docs.python.org/3/tutorial/datastructures.html"
    first = body["results"][0]
    assert set(first) == {
        "doc_id", "url", "title", "snippet", "snippet_text", "highlights", "score", "explain", "similar",
        "lang", "translations", "link", "section",
    }  # fmt: skip
    assert first["lang"] == "en" and first["translations"] == []
    assert first["section"] is None and first["link"] == first["url"], "fixture documents have no sections"
    text, spans = first["snippet_text"], first["highlights"]
    assert "<" not in text and [text[a:b] for a, b in spans][:2] == ["List", "comprehensions"]
    assert first["explain"] is None
    assert body["generation"] and body["partial"] is False and body["missing_shards"] == []
    assert "<mark>List</mark> <mark>comprehensions</mark>" in first["snippet"]


def test_page_markup_never_reaches_results(client: httpx.Client) -> None:
    body = client.get("/v1/search", params={"q": "dough"}).json()
    snippet = body["results"][0]["snippet"]
    assert "<script>" not in snippet and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more." in snippet


@pytest.mark.parametrize(
    ("params", "status", "error"),
    [
        ({"q": ""}, 400, "bad_query"),
        ({}, 400, "bad_parameter"),
        ({"q": "x", "ranker": "magic"}, 400, "bad_parameter"),
        ({"q": "x", "cursor": "not-a-cursor"}, 400, "bad_parameter"),
        ({"q": "x", "explain": "maybe"}, 400, "bad_parameter"),
        ({"q": "x", "site": "exa mple"}, 400, "bad_parameter"),
        ({"q": "x", "page": "0"}, 400, "bad_parameter"),
        ({"q": "x", "page": "abc"}, 400, "bad_parameter"),
        ({"q": "x", "size": "1000"}, 400, "bad_parameter"),
        ({"q": "x", "sort": "date"}, 400, "bad_parameter"),
        ({"q": "lang:klingon-tongue"}, 400, "bad_query"),
    ],
)
def test_bad_parameters_get_4xx_json(
    client: httpx.Client, params: dict[str, str], status: int, error: str
) -> None:
    r = client.get("/v1/search", params=params)
    assert (r.status_code, r.json()["error"]) == (status, error)
    assert r.json()["detail"]


NASTY = [
    '"',
    '""',
    '"""',
    "-",
    "--",
    "- -",
    ":",
    "::",
    "site:",
    "site:.",
    "site:[::1]",
    "lang:",
    "filetype:",
    "a:b:c",
    "(((",
    ")))",
    "[x TO y]",
    "{a}",
    "\\",
    "\\\\",
    "+",
    "!",
    "^",
    "~",
    "*",
    "title:foo",
    "AND OR NOT",
    "/slip flow/",
    "can't I'm",
    "\x00",
    "\x1b[31m",
    "\ud7ff",
    "🚀🔥",
    "ｆｕｌｌｗｉｄｔｈ",
    "א ב ג",
    "日本語 検索",
    "%00",
    "%",
    "<script>alert(1)</script>",
    "' OR 1=1 --",
    "x" * 10_000,
    "list " * 3000,
    '"list comprehension',
    "-list -comprehension",
    "site:python.org -",
    "lang:en lang:de",
    "NaN",
    "1e309",
]


@pytest.mark.parametrize("q", NASTY, ids=range(len(NASTY)))
def test_nasty_queries_never_5xx(client: httpx.Client, q: str) -> None:
    for path in ("/v1/search", "/"):
        r = client.get(path, params={"q": q})
        assert r.status_code in (200, 400), (q, r.status_code, r.text[:200])
        if path == "/v1/search" and r.status_code == 400:
            assert r.json()["detail"]


def test_filters_as_parameters_and_explain(client: httpx.Client) -> None:
    body = client.get(
        "/v1/search", params={"q": "comprehension", "site": "python.org", "explain": "true"}
    ).json()
    urls = {r["url"] for r in body["results"]}
    assert urls == {
        "https://docs.python.org/3/tutorial/datastructures.html",
        "https://wiki.python.org/moin/Generators",
    }
    why = body["results"][0]["explain"]
    assert why["bm25"] == body["results"][0]["score"] and why["lexical_rank"] == 1 and why["position"] == 1


def test_cursor_pages_through_everything_once(client: httpx.Client) -> None:
    first = client.get("/v1/search", params={"q": "list lists comprehension", "size": 2}).json()
    seen = [r["doc_id"] for r in first["results"]]
    cursor = first["next_cursor"]
    while cursor:
        page = client.get("/v1/search", params={"cursor": cursor}).json()
        seen += [r["doc_id"] for r in page["results"]]
        cursor = page["next_cursor"]
    everything = client.get("/v1/search", params={"q": "list lists comprehension", "size": 20}).json()
    assert seen == [r["doc_id"] for r in everything["results"]]
    assert len(seen) == everything["total"]


def test_healthz_and_unknown_route(client: httpx.Client) -> None:
    health = client.get("/healthz").json()
    assert (health["status"], health["documents"]) == ("ok", len(SMALL_WEB))
    # A lexical-only index: BM25 is the default, and /healthz says why.
    assert health["ranker"] == "bm25" and "no vectors" in health["ranker_reason"]
    r = client.get("/v2/nothing")
    assert (r.status_code, r.json()["error"]) == (404, "not_found")


def test_search_page_renders_results_and_paging(client: httpx.Client) -> None:
    r = client.get("/", params={"q": "list"})
    assert r.status_code == 200 and "text/html" in r.headers["content-type"]
    total = client.get("/v1/search", params={"q": "list"}).json()["total"]
    assert total == 6
    assert r.text.count('class="result"') == total
    assert "6 results · page 1 of 1" in r.text
    assert "<mark>" in r.text
    empty = client.get("/")
    assert empty.status_code == 200 and 'name="q"' in empty.text


def test_openapi_documents_search(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    params = {p["name"]: p["in"] for p in spec["paths"]["/v1/search"]["get"]["parameters"]}
    queried = "q page size site lang filetype ranker explain cursor spell facets".split()
    assert params == {**dict.fromkeys(queried, "query"), "accept-language": "header"}
    hit = spec["components"]["schemas"]["HitModel"]
    assert {"link", "section"} <= set(hit["properties"]) and "link" in hit["required"]
    assert set(spec["components"]["schemas"]["SectionModel"]["properties"]) == {"heading", "anchor"}


def test_second_identical_query_is_served_from_cache(client: httpx.Client) -> None:
    params = {"q": "Generators   lazy", "size": 3}
    first = client.get("/v1/search", params=params).json()
    second = client.get("/v1/search", params={"q": "generators lazy", "size": 3}).json()
    assert second["cached"] is True
    assert [r["doc_id"] for r in second["results"]] == [r["doc_id"] for r in first["results"]]
    metrics = client.get("/metrics").text
    assert 'trawl_query_cache_total{result="hit"}' in metrics
    assert "trawl_query_seconds_bucket" in metrics


def test_result_links_log_the_click_then_redirect(client: httpx.Client) -> None:
    import re

    page = client.get("/", params={"q": "generators"})
    assert page.headers.get("x-trawl-impression")
    links = re.findall(r'<h2><a href="(/r\?[^"]+)"', page.text)
    assert links, page.text[:500]
    target = client.get(links[0].replace("&amp;", "&"), follow_redirects=False)
    assert target.status_code == 303
    assert target.headers["location"] == "https://wiki.python.org/moin/Generators"
    api = client.get("/v1/search", params={"q": "generators"})
    impression = api.headers["x-trawl-impression"]
    doc_id = api.json()["results"][0]["doc_id"]
    ok = client.post("/v1/click", json={"impression_id": impression, "doc_id": doc_id, "position": 1})
    assert ok.status_code == 202 and ok.json()["click_id"]
    wrong = client.post("/v1/click", json={"impression_id": impression, "doc_id": doc_id, "position": 2})
    assert wrong.status_code == 400
    # The redirect target comes from the index: an unknown document is a 404, not a redirect.
    assert (
        client.get("/r", params={"i": "x", "p": 1, "d": "12345"}, follow_redirects=False).status_code == 404
    )


@pytest.mark.parametrize("value", ["²", "٣", "1e308", "Infinity", "9223372036854775808", "1.0", "+5", " 5"])
def test_integer_parameters_take_ascii_digits_only(client: httpx.Client, value: str) -> None:
    answers = [
        client.get(f"/v1/documents/{value}"),
        client.get("/v1/search", params={"q": "python", "page": value}),
        client.get("/v1/search", params={"q": "python", "size": value}),
        client.get("/", params={"q": "python", "page": value}),
        client.get("/explain", params={"q": "python", "doc_id": value}),
        client.get("/r", params={"i": "0" * 32, "p": "1", "d": value}, follow_redirects=False),
        client.get("/r", params={"i": "0" * 32, "p": value, "d": "1"}, follow_redirects=False),
    ]
    assert [r.status_code for r in answers] == [400] * len(answers)
    assert all(r.headers.get("connection") != "close" for r in answers)


def test_out_of_range_paging_says_the_same_thing_everywhere(client: httpx.Client) -> None:
    def detail(**params: str) -> tuple[str, str]:
        body = client.get("/v1/search", params={"q": "python", **params}).json()
        return body["error"], body["detail"]

    assert detail(size="100000") == ("bad_parameter", "size=100000 is out of range; use 1 to 50.")
    assert detail(size="1000") == ("bad_parameter", "size=1000 is out of range; use 1 to 50.")
    assert detail(page="-1")[0] == detail(page="1000")[0] == "bad_parameter"
    assert detail(page="1000")[1].startswith("page=1000 is out of range; use 1 to 100")
    web = {v: client.get("/", params={"q": "python", "page": v}) for v in ("-1", "abc")}
    assert "page=-1 is out of range; use 1 to 100" in web["-1"].text
    assert "page=&#39;abc&#39; is not a whole number; use 1 to 100" in web["abc"].text
    refused = client.get("/", params={"q": "python", "size": "1000"})
    assert refused.status_code == 400 and "size=1000 is out of range; use 1 to 50." in refused.text
    excluded = client.get("/", params={"q": "-async"})
    assert excluded.status_code == 400 and "needs at least one word to look for" in excluded.text


def test_tampered_or_hand_made_cursor_is_a_400(client: httpx.Client) -> None:
    cursor = client.get("/v1/search", params={"q": "python", "size": 1}).json()["next_cursor"]
    payload, mac = cursor.split(".")
    raw = json.loads(base64.urlsafe_b64decode(payload + "=="))
    hand_made = base64.urlsafe_b64encode(json.dumps({**raw, "s": 10**6}).encode()).decode().rstrip("=")
    for token in (f"{hand_made}.{mac}", hand_made, cursor[:-2] + "AA", "e30." + mac):
        r = client.get("/v1/search", params={"cursor": token})
        assert r.status_code == 400 and "cursor" in r.json()["detail"], token
    assert client.get("/v1/search", params={"cursor": cursor}).status_code == 200


def test_a_repeated_click_is_answered_but_logged_once(client: httpx.Client) -> None:
    r = client.get("/v1/search", params={"q": "python"})
    impression, doc_id = r.headers["x-trawl-impression"], int(r.json()["results"][0]["doc_id"])
    body = {"impression_id": impression, "doc_id": doc_id, "position": 1}
    first, again = client.post("/v1/click", json=body), client.post("/v1/click", json=body)
    assert (first.status_code, again.status_code) == (202, 200)
    assert first.json()["click_id"] == again.json()["click_id"]
    assert client.post("/v1/click", json={**body, "position": 1.0}).status_code == 400
    assert client.post("/v1/click", json={**body, "position": "²"}).status_code == 400


@pytest.mark.parametrize(
    ("q", "ignored"),
    [
        # A short query searches its stopwords in titles and headings: none is ignored.
        ("if list", []),
        ('"to be" comprehension -the', []),  # excluded words are not searched anyway
        ("list comprehension", []),
        # A sentence's stopwords are grammar: not searched, and named.
        ("how do I sort a list of words", ["how", "do", "i", "a", "of"]),
        ('what is "a list comprehension" for', ["what", "is", "for", "a"]),  # free words, then phrases
    ],
)
def test_words_the_index_does_not_hold_are_named(client: httpx.Client, q: str, ignored: list[str]) -> None:
    """A query of very common words found nothing with no word of why; now the answer names
    the words that were not searched (those of a query too long for them to count)."""
    body = client.get("/v1/search", params={"q": q}).json()
    assert body["ignored_words"] == ignored
    page = client.get("/", params={"q": q}).text
    if ignored:
        assert f"Very common words of a long query are not searched: {', '.join(ignored)}." in page
    else:
        assert 'id="ignored"' not in page


def test_a_query_longer_than_the_service_reads_says_what_was_cut(client: httpx.Client) -> None:
    long = "dough " * 500  # 3,000 characters; the first 2,048 hold 342 words (the last one "do")
    body = client.get("/v1/search", params={"q": long}).json()
    assert body["results"] and body["query_truncated"] == (
        "The query is too long: only its first 2,048 characters were read; "
        "only its first 64 words and phrases were searched (278 left out)."
    )
    assert client.get("/v1/search", params={"q": "dough"}).json()["query_truncated"] is None


def test_facets_count_every_result_per_host_and_narrow_with_the_filter(client: httpx.Client) -> None:
    body = client.get("/v1/search", params={"q": "python OR bread", "facets": "host,filetype,lang"}).json()
    hosts = {f["value"]: f["count"] for f in body["facets"]["host"]}
    assert hosts and "org" not in hosts and "python.org" not in hosts  # suffixes only, not hosts
    assert sum(hosts.values()) == body["total"]  # no host is a subdomain of another in SMALL_WEB
    host, count = next(iter(hosts.items()))
    narrowed = client.get("/v1/search", params={"q": "python OR bread", "site": host}).json()
    assert narrowed["total"] == count
    assert body["facets_missing_shards"] == [] and set(body["facets"]) == {"host", "filetype", "lang"}
    assert client.get("/v1/search", params={"q": "bread"}).json()["facets"] is None
    bad = client.get("/v1/search", params={"q": "bread", "facets": "host,colour"})
    assert (bad.status_code, bad.json()["error"]) == (400, "bad_parameter") and "'colour'" in bad.text


def test_the_page_numbers_its_pages_and_narrows_by_site(client: httpx.Client) -> None:
    import re

    total = client.get("/v1/search", params={"q": "list", "size": 1}).json()["total"]
    page = client.get("/", params={"q": "list", "size": "1", "page": "2"}).text
    numbers = re.findall(r'<a class="page" href="[^"]*page=(\d+)[^"]*">(\d+)</a>', page)
    assert [int(n) for n, _ in numbers] == [n for n in range(1, total + 1) if n != 2]
    assert (
        all(a == b for a, b in numbers) and '<span class="page current" aria-current="page">2</span>' in page
    )
    assert all("size=1" in href for href in re.findall(r'class="page" href="([^"]*)"', page))
    both = client.get("/", params={"q": "python OR bread"}).text
    sites = re.findall(r'<p id="facet-host">(.*?)</p>', both, re.S)
    assert sites and "docs.python.org" in sites[0] and "example.org" in sites[0]
    link = re.search(r'href="([^"]*site=example.org[^"]*)"', sites[0])
    assert link is not None
    narrowed = client.get(link.group(1).replace("&amp;", "&")).text
    assert 'value="example.org"' in narrowed and "docs.python.org/" not in narrowed
    long = client.get("/", params={"q": "bread " * 400}).text
    assert 'id="truncated"' in long and "only its first 2,048 characters were read" in long
