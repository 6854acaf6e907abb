"""``/indexnow``: a site on loopback proves its key; its URLs are queued ahead of the crawl's own."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.routes.indexnow import PUSH_PRIORITY
from core.crawldir import CrawlDir
from core.settings import Settings
from core.types import Document, doc_id_for
from crawl.state.records import NewUrl, Outcome, UrlStatus, UrlUpdate
from crawl.state.sqlite import CrawlDb
from retrieval.index.root import IndexRoot

KEY = "a1b2c3d4-e5f6-trawl"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A loopback site whose root holds ``{KEY}.txt`` and a key file elsewhere."""
    root = tmp_path_factory.mktemp("indexnow-site")
    (root / f"{KEY}.txt").write_text(KEY + "\n")
    (root / "keys").mkdir()
    (root / "keys" / "mine.txt").write_text(KEY)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = IndexRoot(tmp_path_factory.mktemp("indexnow-index") / "index")
    docs = [
        Document(doc_id=doc_id_for(u), url=u, title="Page", body="indexnow page") for u in ["http://a.test/"]
    ]
    root.publish(root.build(docs, shards=1))
    return root.root


def _client(index_dir: Path, crawl_data: Path | None, *, scope: str = "host") -> TestClient:
    settings = Settings.model_validate(
        {
            "api": {"crawl_data": str(crawl_data) if crawl_data else None, "rate_limit_per_s": 0},
            "crawl": {"allow_loopback": True, "scope": scope},
            "search": {"use_vectors": False},
        }
    )
    return TestClient(create_app(settings, index_dir=index_dir))


def _crawling(crawl_data: Path, site: str) -> None:
    """The crawl in ``crawl_data`` holds the site's front page: notifications for it are taken."""
    db = CrawlDb(CrawlDir(crawl_data).db)
    db.apply(inserts=[NewUrl(f"http://{site}/", site, 0, 1.0)], leases=[], updates=[], hosts=[], now=1.0)
    db.close()


@pytest.fixture
def recording_site(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A loopback site with the key file that records the paths asked of it."""
    root = tmp_path / "recorded-site"
    root.mkdir()
    (root / f"{KEY}.txt").write_text(KEY)
    asked: list[str] = []

    class Recording(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the base class's name)
            asked.append(self.path)
            super().do_GET()

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Recording, directory=str(root))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}", asked
    server.shutdown()


def test_a_verified_key_queues_the_urls_at_top_priority(tmp_path: Path, index_dir: Path, site: str) -> None:
    known = f"http://{site}/old.html"
    db = CrawlDb(CrawlDir(tmp_path).db)
    db.apply(inserts=[NewUrl(known, site, 1, 0.5)], leases=[], updates=[], hosts=[], now=1.0)
    done = UrlUpdate(known, UrlStatus.DONE, Outcome.INDEXED, 200, fetched=True, last_fetch=1.0)
    db.apply(inserts=[], leases=[], updates=[done], hosts=[], now=1.0)
    db.close()
    new = [f"http://{site}/a.html", f"http://{site}/b.html"]
    with _client(index_dir, tmp_path) as client:
        post = client.post("/indexnow", json={"host": site, "key": KEY, "urlList": [*new, known]})
        get = client.get("/indexnow", params={"url": f"http://{site}/c.html", "key": KEY})
        located = client.post(
            "/indexnow",
            json={
                "host": site,
                "key": KEY,
                "keyLocation": f"http://{site}/keys/mine.txt",
                "urlList": [f"http://{site}/keys/page.html"],
            },
        )
    assert (post.status_code, post.json()) == (200, {"queued": 3})
    assert get.status_code == 200 and located.status_code == 200
    db = CrawlDb(CrawlDir(tmp_path).db)
    try:
        for url in [*new, known, f"http://{site}/c.html"]:
            row = db.row(url)
            assert row is not None, url
            assert (row["status"], row["priority"]) == ("pending", PUSH_PRIORITY)
    finally:
        db.close()


def test_a_wrong_or_missing_key_file_is_403(tmp_path: Path, index_dir: Path, site: str) -> None:
    _crawling(tmp_path, site)
    with _client(index_dir, tmp_path) as client:
        wrong = client.post(
            "/indexnow", json={"host": site, "key": "not-the-key-1", "urlList": [f"http://{site}/"]}
        )
        elsewhere = client.get(
            "/indexnow",
            params={"url": f"http://{site}/x", "key": KEY, "keyLocation": f"http://{site}/nope.txt"},
        )
    assert (wrong.status_code, wrong.json()["error"]) == (403, "key_not_valid")
    assert elsewhere.status_code == 403
    assert list(CrawlDb(CrawlDir(tmp_path).db).iter_urls()) == [f"http://{site}/"]  # nothing queued


def test_urls_of_another_host_are_422(tmp_path: Path, index_dir: Path, site: str) -> None:
    with _client(index_dir, tmp_path) as client:
        foreign = client.post(
            "/indexnow", json={"host": site, "key": KEY, "urlList": [f"http://{site}/", "http://other.test/"]}
        )
        location = client.post(
            "/indexnow",
            json={
                "host": site,
                "key": KEY,
                "keyLocation": "http://other.test/k.txt",
                "urlList": [f"http://{site}/"],
            },
        )
    assert (foreign.status_code, foreign.json()["error"]) == (422, "urls_not_of_host")
    assert location.status_code == 422


@pytest.mark.parametrize(
    "body",
    [
        {"host": "h.test", "key": "short", "urlList": ["http://h.test/"]},
        {"host": "h.test", "key": "has spaces in it", "urlList": ["http://h.test/"]},
        {"host": "h.test", "key": KEY, "urlList": []},
        {"host": "h.test", "key": KEY, "urlList": ["ftp://h.test/file"]},
        {"key": KEY, "urlList": ["http://h.test/"]},
    ],
)
def test_malformed_notifications_are_400(tmp_path: Path, index_dir: Path, body: dict[str, object]) -> None:
    with _client(index_dir, tmp_path) as client:
        r = client.post("/indexnow", json=body)
        bad_get = client.get("/indexnow", params={"url": "not a url", "key": KEY})
    assert r.status_code == 400, r.json()
    assert bad_get.status_code == 400


def test_without_crawl_data_it_is_not_offered(index_dir: Path, site: str) -> None:
    with _client(index_dir, None) as client:
        r = client.post("/indexnow", json={"host": site, "key": KEY, "urlList": [f"http://{site}/"]})
    assert (r.status_code, r.json()["error"]) == (404, "not_enabled")


def test_a_host_over_its_rate_is_429(
    tmp_path: Path, index_dir: Path, site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.routes import indexnow

    monkeypatch.setattr(indexnow, "_throttle", indexnow._Throttle(2))
    _crawling(tmp_path, site)
    body = {"host": site, "key": KEY, "urlList": [f"http://{site}/"]}
    with _client(index_dir, tmp_path) as client:
        codes = [client.post("/indexnow", json=body).status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_forged_keys_cannot_spend_the_sites_quota(
    tmp_path: Path, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notifications counted before the key check let anyone lock a site out of IndexNow by
    sending bad keys in its name. Now a verified key is remembered (its notifications fetch
    nothing) and only verified notifications count; forged keys use up key-file fetches only."""
    from cachetools import TTLCache

    from api.routes import indexnow

    monkeypatch.setattr(indexnow, "_throttle", indexnow._Throttle(3))
    monkeypatch.setattr(indexnow, "_key_checks", indexnow._Throttle(2))
    monkeypatch.setattr(indexnow, "_verified", TTLCache(maxsize=10, ttl=60))
    root = tmp_path / "site"
    root.mkdir()
    key_file = root / f"{KEY}.txt"
    key_file.write_text(KEY)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    site = f"127.0.0.1:{server.server_address[1]}"
    _crawling(tmp_path / "crawl", site)
    try:
        with _client(index_dir, tmp_path / "crawl") as client:

            def push(key: str) -> int:
                body = {"host": site, "key": key, "urlList": [f"http://{site}/page.html"]}
                return client.post("/indexnow", json=body).status_code

            assert push(KEY) == 200  # verified: one key-file fetch
            key_file.unlink()  # a remembered key is not fetched again
            forged = [push(f"forged-key-{i}") for i in range(3)]
            ours = [push(KEY) for _ in range(3)]
    finally:
        server.shutdown()
    assert forged == [403, 429, 429]  # the second fetch was the last the host allowed this minute
    assert ours == [200, 200, 429]  # the site's own quota of 3 verified notifications


def test_a_host_the_crawl_does_not_cover_is_422_before_anything_is_fetched(
    tmp_path: Path, index_dir: Path, recording_site: tuple[str, list[str]]
) -> None:
    """Any site that could serve a key file could add itself to the crawl, and make Trawl
    fetch from any host it named. Now only hosts the crawl holds URLs of are taken (scope
    ``host``), and the key file of any other host is never asked for."""
    site, asked = recording_site
    crawl_data = tmp_path / "crawl"
    body = {"host": site, "key": KEY, "urlList": [f"http://{site}/new.html"]}
    with _client(index_dir, crawl_data) as client:
        no_crawl_yet = client.post("/indexnow", json=body)
        _crawling(crawl_data, "127.0.0.1:9")  # the crawl holds another host (another port) only
        other_host = client.post("/indexnow", json=body)
        one_url = client.get("/indexnow", params={"url": f"http://{site}/x.html", "key": KEY})
    for answer in (no_crawl_yet, other_host, one_url):
        assert (answer.status_code, answer.json()["error"]) == (422, "host_not_crawled"), answer.text
        assert site in answer.json()["detail"]
    assert asked == []  # no key file fetched
    assert list(CrawlDb(CrawlDir(crawl_data).db).iter_urls()) == ["http://127.0.0.1:9/"]
    with _client(index_dir, crawl_data, scope="any") as client:  # a crawl of the open web takes any host
        taken = client.post("/indexnow", json=body)
    assert (taken.status_code, taken.json()) == (200, {"queued": 1})
    assert asked == [f"/{KEY}.txt"]


def test_scope_domain_takes_hosts_under_a_crawled_domain(tmp_path: Path) -> None:
    """With scope ``domain`` a notification may come from a subdomain the crawl has not met
    yet (as links to it would be followed); a look-alike domain is still refused."""
    from api.routes.indexnow import _crawled_here

    db = CrawlDb(CrawlDir(tmp_path).db)
    db.apply(
        inserts=[NewUrl("http://www.example.org/", "www.example.org", 0, 1.0)],
        leases=[], updates=[], hosts=[], now=1.0,
    )  # fmt: skip
    try:
        assert _crawled_here(db, "www.example.org", "host")
        assert not _crawled_here(db, "docs.example.org", "host")
        assert _crawled_here(db, "docs.example.org", "domain")
        assert _crawled_here(db, "example.org", "domain")
        assert _crawled_here(db, "a.b.example.org:8443", "domain")
        assert not _crawled_here(db, "example.org.evil.test", "domain")
        assert not _crawled_here(db, "badexample.org", "domain")
        assert not _crawled_here(db, "org", "domain")
    finally:
        db.close()


@pytest.fixture
def fresh_quotas(monkeypatch: pytest.MonkeyPatch) -> None:
    """Throttles and the verified-key cache of this test alone (every site here is 127.0.0.1)."""
    from cachetools import TTLCache

    from api.routes import indexnow

    monkeypatch.setattr(indexnow, "_throttle", indexnow._Throttle(1000))
    monkeypatch.setattr(indexnow, "_key_checks", indexnow._Throttle(1000))
    monkeypatch.setattr(indexnow, "_verified", TTLCache(maxsize=100, ttl=60))


def _serve(root: Path) -> http.server.ThreadingHTTPServer:
    """A loopback site serving ``root``, plus ``/search?q=…``, a page that echoes its query
    as Trawl's own search page does."""

    class Echoing(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the base class's name)
            if self.path.startswith("/search?"):
                body = f"<html><body>Results for {self.path.partition('=')[2]}</body></html>".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Echoing, directory=str(root))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.usefixtures("fresh_quotas")
def test_a_forged_proof_of_ownership_is_refused(tmp_path: Path, index_dir: Path) -> None:
    """The site names a host without a port; the forger points ``keyLocation`` at another
    port of that host (Trawl's own search page echoes the key), at a page that merely
    contains the key, or at a proper key file of another port. None of it proves the site."""
    site_root, other_root = tmp_path / "site", tmp_path / "other"
    for root in (site_root, other_root):
        root.mkdir()
    (site_root / "about.html").write_text(f"<html><body>Our IndexNow key is {KEY}.</body></html>")
    (other_root / f"{KEY}.txt").write_text(KEY)  # a real key file, but of another port
    site, other = _serve(site_root), _serve(other_root)
    a, b = site.server_address[1], other.server_address[1]
    crawl = tmp_path / "crawl"
    _crawling(crawl, f"127.0.0.1:{a}")
    url = f"http://127.0.0.1:{a}/new.html"
    forgeries = {
        "echo on another port": f"http://127.0.0.1:{b}/search?q={KEY}",
        "key file on another port": f"http://127.0.0.1:{b}/{KEY}.txt",
        "echo with a query": f"http://127.0.0.1:{a}/search?q={KEY}",
        "page containing the key": f"http://127.0.0.1:{a}/about.html",
    }
    try:
        with _client(index_dir, crawl) as client:
            answers = {
                name: client.post(
                    "/indexnow",
                    json={"host": "127.0.0.1", "key": KEY, "keyLocation": where, "urlList": [url]},
                )
                for name, where in forgeries.items()
            }
    finally:
        site.shutdown()
        other.shutdown()
    for name, answer in answers.items():
        expected = 403 if name == "page containing the key" else 422
        assert answer.status_code == expected, (name, answer.text)
    assert list(CrawlDb(CrawlDir(crawl).db).iter_urls()) == [f"http://127.0.0.1:{a}/"]  # nothing queued


@pytest.mark.usefixtures("fresh_quotas")
def test_a_closed_port_and_a_missing_key_file_answer_alike(
    tmp_path: Path, index_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A refused connection and an HTTP 404 used to answer in different words: a port
    scanner for anyone. Now both give one 403; the operator's log says which it was."""
    import socket

    (tmp_path / "site").mkdir()
    open_site = _serve(tmp_path / "site")  # no key file: 404
    closed = socket.socket()  # bound, never listening: connections are refused
    closed.bind(("127.0.0.1", 0))
    ports = {"open": open_site.server_address[1], "closed": closed.getsockname()[1]}
    crawl = tmp_path / "crawl"
    for port in ports.values():
        _crawling(crawl, f"127.0.0.1:{port}")
    try:
        with _client(index_dir, crawl) as client, caplog.at_level("WARNING", "api.routes.indexnow"):
            answers = {
                name: client.get("/indexnow", params={"url": f"http://127.0.0.1:{port}/x.html", "key": KEY})
                for name, port in ports.items()
            }
    finally:
        open_site.shutdown()
        closed.close()
    seen = {
        name: (a.status_code, a.json()["error"], a.json()["detail"].replace(str(ports[name]), "PORT"))
        for name, a in answers.items()
    }
    assert seen["open"] == seen["closed"]
    assert seen["open"][:2] == (403, "key_not_valid")
    assert "answered HTTP 404" in caplog.text and "could not be fetched" in caplog.text


@pytest.mark.usefixtures("fresh_quotas")
def test_a_host_without_a_port_proves_each_origin_at_its_root(tmp_path: Path, index_dir: Path) -> None:
    """``host`` without a port: the key file is looked for on the URLs' own origin."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / f"{KEY}.txt").write_text(f"\ufeff{KEY}\r\n")  # a BOM and CRLF are fine
    site = _serve(tmp_path / "site")
    port = site.server_address[1]
    crawl = tmp_path / "crawl"
    _crawling(crawl, f"127.0.0.1:{port}")
    try:
        with _client(index_dir, crawl) as client:
            r = client.post(
                "/indexnow",
                json={"host": "127.0.0.1", "key": KEY, "urlList": [f"http://127.0.0.1:{port}/fresh.html"]},
            )
    finally:
        site.shutdown()
    assert (r.status_code, r.json()) == (200, {"queued": 1})
