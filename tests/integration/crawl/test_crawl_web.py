"""One crawl over a fixture web of several loopback hosts; assertions from what the servers saw.

Hosts: A (127.0.0.2) robots rules, Crawl-delay, sitemap index, duplicates, canonical,
noindex, charsets, redirect loop and redirects towards a private address; B (named
``b.test`` through the injected resolver, 127.0.0.3) errors, 429, slow and oversized
and binary bodies; C (127.0.0.4) robots.txt answering 500; D (127.0.0.5) an endless
calendar; P (127.0.0.9) a "private" host outside the guard's allow-list.
"""

from __future__ import annotations

import asyncio
import gzip
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import Response
from warcio.archiveiterator import ArchiveIterator

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.linkgraph import LinkGraphStore, anchors_by_target
from core.settings import CrawlSettings
from crawl.run.counters import CrawlSummary
from crawl.run.inspect import inspect_url
from crawl.run.loop import Crawler
from crawl.scope import Scope
from crawl.state.sqlite import CrawlDb
from tests.fixtures.crawl.web import HostServer, Site, html_page, prose, sleep_then

CRAWL_DELAY_S = 0.2
RETRY_AFTER_S = 1
MAX_PER_HOST = 30
NEAR_TEXT = prose(7, 300)


@dataclass
class CrawlRun:
    a: HostServer
    b: HostServer
    c: HostServer
    d: HostServer
    p: HostServer
    b_authority: str
    data: Path
    summary: CrawlSummary
    settings: CrawlSettings

    def rows(self) -> dict[str, dict]:
        db = CrawlDb(CrawlDir(self.data).db)
        try:
            return {url: db.row(url) for url in db.iter_urls()}  # type: ignore[misc]
        finally:
            db.close()


def _site_a(b: str, c: HostServer, d: HostServer, p: HostServer) -> Site:
    site = Site()
    site.raw(
        "/robots.txt",
        (
            f"User-agent: *\nDisallow: /private/\nCrawl-delay: {CRAWL_DELAY_S}\nSitemap: /sitemap_index.xml\n"
        ).encode(),
        content_type="text/plain",
    )
    links = [
        ("/a", "Page A"),
        ("/private/secret", "Secret"),
        ("/dup1", "Dup one"),
        ("/dup2", "Dup two"),
        ("/near1", "Near one"),
        ("/near2", "Near two"),
        ("/canon-alias", "Alias"),
        ("/noindex", "No index"),
        ("/latin", "Latin"),
        ("/utf8-as-latin1", "Mislabelled"),
        ("/loop1", "Loop"),
        ("/to-private", "Private"),
        ("/to-evil", "Evil"),
        ("/to-b", "Moved"),
        ("/?utm_source=newsletter", "Home again"),
        (f"http://{b}/", "Host B"),
        (c.url("/c-page"), "Host C"),
        (d.url("/calendar?month=2024-01"), "Calendar"),
    ]
    site.page("/", html_page("Home of A", prose(1), links=links))
    site.page("/a", html_page("Page A", prose(2), links=[("/b-page", "the b page")]))
    site.page("/b-page", html_page("B page", prose(3)))
    site.page("/from-sitemap", html_page("Only in the sitemap", prose(4)))
    site.page("/private/secret", html_page("Secret", prose(5)))
    dup = html_page("Duplicate", prose(6))
    site.page("/dup1", dup)
    site.page("/dup2", dup)
    site.page("/near1", html_page("Near", NEAR_TEXT))
    site.page("/near2", html_page("Near", NEAR_TEXT.replace(NEAR_TEXT.split()[150], "different", 1)))
    site.page(
        "/canon-alias",
        html_page("Alias", prose(8), head='<link rel="canonical" href="/canon-target">'),
    )
    site.page("/canon-target", html_page("Canonical target", prose(9)))
    site.page(
        "/noindex",
        html_page(
            "Hidden",
            prose(10),
            links=[("/via-noindex", "via")],
            head='<meta name="robots" content="noindex">',
        ),
    )
    site.page("/via-noindex", html_page("Reached through a noindex page", prose(11)))
    site.raw(
        "/latin",
        html_page("Latin", "Le café est très bon " + prose(12)).encode("cp1252"),
        content_type="text/html; charset=utf-8",
    )
    site.raw(
        "/utf8-as-latin1",
        html_page("Mislabelled", "Une naïve façade " + prose(13)).encode("utf-8"),
        content_type="text/html; charset=iso-8859-1",
    )
    for path, target in (
        ("/loop1", "/loop2"),
        ("/loop2", "/loop1"),
        ("/to-private", p.url("/secret")),
        ("/to-evil", f"http://evil.test:{p.port}/secret"),
        ("/to-b", f"http://{b}/moved-target"),
    ):
        site.routes[path] = _redirect(target)
    site.raw(
        "/sitemap_index.xml",
        (
            b'<?xml version="1.0"?><sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            b"<sitemap><loc>/sitemap-pages.xml.gz</loc></sitemap></sitemapindex>"
        ),
        content_type="application/xml",
    )
    return site


def _redirect(target: str):  # noqa: ANN202
    async def handler(request: Request) -> Response:
        return Response(b"", 302, headers={"location": target})

    return handler


def _site_b() -> Site:
    site = Site()
    links = [(p, p) for p in ("/slow", "/too-slow", "/err500", "/rate", "/big", "/binary", "/gone")]
    site.page("/", html_page("Home of B", prose(20), links=links))
    site.routes["/slow"] = lambda r: sleep_then(
        0.4, Response(html_page("Slow", prose(21)), media_type="text/html")
    )
    site.routes["/too-slow"] = lambda r: sleep_then(
        1.6, Response(html_page("Too slow", prose(22)), media_type="text/html")
    )
    site.page("/err500", "<html><body>boom</body></html>", status=500)
    calls = {"rate": 0}

    async def rate(request: Request) -> Response:
        calls["rate"] += 1
        if calls["rate"] == 1:
            return Response(b"slow down", 429, headers={"retry-after": str(RETRY_AFTER_S)})
        return Response(html_page("Rate limited once", prose(23)), media_type="text/html")

    site.routes["/rate"] = rate
    site.raw("/big", html_page("Big", prose(24, 40_000)).encode())
    site.raw("/binary", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40, content_type="text/html")
    site.page("/moved-target", html_page("Moved here", prose(25)))
    return site


def _site_c() -> Site:
    site = Site()
    site.raw("/robots.txt", b"oops", status=500, content_type="text/plain")
    site.page("/c-page", html_page("C page", prose(30)))
    return site


def _site_d() -> Site:
    site = Site()

    async def calendar(request: Request) -> Response:
        year, month = map(int, request.query_params.get("month", "2024-01").split("-"))
        prev_m = f"{year - (month == 1)}-{12 if month == 1 else month - 1:02d}"
        next_m = f"{year + (month == 12)}-{1 if month == 12 else month + 1:02d}"
        links = [
            (f"/calendar?month={prev_m}", "previous month"),
            (f"/calendar?month={next_m}", "next month"),
            (f"/calendar?month={year + 1}-{month:02d}", "next year"),
        ]
        seed = year * 12 + month
        return Response(
            html_page(f"Calendar {year}-{month:02d}", prose(seed), links=links), media_type="text/html"
        )

    site.routes["/calendar"] = calendar
    return site


def _site_p() -> Site:
    site = Site()
    site.page("/secret", html_page("Internal service", prose(40)))
    return site


@pytest.fixture(scope="module")
def crawl_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CrawlRun]:
    b = HostServer(_site_b(), "127.0.0.3").start()
    c = HostServer(_site_c(), "127.0.0.4").start()
    d = HostServer(_site_d(), "127.0.0.5").start()
    p = HostServer(_site_p(), "127.0.0.9").start()
    b_authority = f"b.test:{b.port}"
    a = HostServer(_site_a(b_authority, c, d, p), "127.0.0.2").start()
    a.site.raw(
        "/sitemap-pages.xml.gz",
        gzip.compress(
            (
                '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                f"<url><loc>{a.url('/from-sitemap')}</loc></url></urlset>"
            ).encode()
        ),
        content_type="application/gzip",
    )
    names = {"b.test": ["127.0.0.3"], "evil.test": ["127.0.0.9"]}

    async def resolver(host: str) -> list[str]:
        if host not in names:
            raise OSError(f"unknown test host {host}")
        return names[host]

    settings = CrawlSettings(
        min_delay_s=0.02,
        response_time_factor=0.5,
        fetch_timeout_s=1.0,
        max_page_bytes=64 * 1024,
        max_redirects=3,
        max_depth=40,
        max_pages=500,
        max_pages_per_host=MAX_PER_HOST,
        max_links_per_page=100,
        robots_error_ttl_s=60,
        max_retries=1,
        backoff_base_s=0.1,
        max_backoff_s=2.0,
        concurrency=4,
        flush_interval_s=0.2,
        allowed_networks=["127.0.0.2/32", "127.0.0.3/32", "127.0.0.4/32", "127.0.0.5/32"],
    )
    scope = Scope(
        mode="host",
        hosts=frozenset(
            {a.authority, b_authority, c.authority, d.authority, p.authority, f"evil.test:{p.port}"}
        ),
        max_depth=settings.max_depth,
    )
    data = tmp_path_factory.mktemp("crawl")
    crawler = Crawler(data, settings, seeds=[a.url("/")], scope=scope, resolver=resolver)
    summary = asyncio.run(crawler.run())
    try:
        yield CrawlRun(a, b, c, d, p, b_authority, data, summary, settings)
    finally:
        for server in (a, b, c, d, p):
            server.stop()


def _doc_urls(run: CrawlRun) -> set[str]:
    return {doc.url for doc in DocStore(CrawlDir(run.data).docs).iter_documents()}


def test_never_more_than_one_request_in_flight_per_host(crawl_run: CrawlRun) -> None:
    peaks = {
        s.address: s.recorder.max_in_flight for s in (crawl_run.a, crawl_run.b, crawl_run.c, crawl_run.d)
    }
    assert peaks == {"127.0.0.2": 1, "127.0.0.3": 1, "127.0.0.4": 1, "127.0.0.5": 1}


def test_disallowed_paths_are_never_requested(crawl_run: CrawlRun) -> None:
    assert not [p for p in crawl_run.a.recorder.paths() if p.startswith("/private/")]
    assert crawl_run.c.recorder.paths() == ["/robots.txt"]
    rows = crawl_run.rows()
    assert rows[crawl_run.a.url("/private/secret")]["outcome"] == "blocked: robots.txt"
    assert rows[crawl_run.c.url("/c-page")]["status"] == "failed"
    assert rows[crawl_run.c.url("/c-page")]["outcome"] == "robots.txt unavailable"


def test_crawl_delay_is_respected_between_requests(crawl_run: CrawlRun) -> None:
    requests = crawl_run.a.recorder.sorted_requests()
    gaps = [later.start - earlier.end for earlier, later in zip(requests, requests[1:], strict=False)]
    assert len(requests) >= 15
    assert min(gaps) >= CRAWL_DELAY_S - 0.01, gaps


def test_retry_after_is_honoured(crawl_run: CrawlRun) -> None:
    requests = crawl_run.b.recorder.sorted_requests()
    first_429 = next(r for r in requests if r.path == "/rate")
    after = [r for r in requests if r.start > first_429.end]
    assert after, "nothing was requested from B after the 429"
    # ``end`` is taken before the answer's last bytes are sent (the client cannot have it
    # sooner), and the host's own delays here are 0.02 s (min) and 0.1 s (first backoff), so
    # only the timers' granularity is allowed for.
    assert after[0].start - first_429.end >= RETRY_AFTER_S - 0.01
    assert [r.path for r in requests].count("/rate") == 2


def test_min_delay_respected_on_other_hosts(crawl_run: CrawlRun) -> None:
    for server in (crawl_run.b, crawl_run.d):
        requests = server.recorder.sorted_requests()
        gaps = [later.start - earlier.end for earlier, later in zip(requests, requests[1:], strict=False)]
        assert min(gaps) >= crawl_run.settings.min_delay_s - 0.005


def test_calendar_trap_is_bounded_by_the_host_budget(crawl_run: CrawlRun) -> None:
    pages = [p for p in crawl_run.d.recorder.paths() if p != "/robots.txt"]
    assert len(pages) == MAX_PER_HOST
    assert len(set(pages)) == MAX_PER_HOST
    blocked = [r for r in crawl_run.rows().values() if r["blocked_reason"] == "host page budget reached"]
    assert blocked and all(r["host"] == crawl_run.d.authority for r in blocked)


def test_address_guard_refuses_private_targets_reached_by_redirect(crawl_run: CrawlRun) -> None:
    assert crawl_run.p.recorder.paths() == []
    rows = crawl_run.rows()
    for url in (crawl_run.p.url("/secret"), f"http://evil.test:{crawl_run.p.port}/secret"):
        assert rows[url]["status"] == "blocked"
        assert rows[url]["outcome"] == "blocked: address guard"
        assert "non-public address 127.0.0.9" in rows[url]["blocked_reason"]


def test_duplicates_are_recorded_not_indexed(crawl_run: CrawlRun) -> None:
    rows = crawl_run.rows()
    docs = _doc_urls(crawl_run)
    sizes = {d.url: d.dup_cluster_size for d in DocStore(CrawlDir(crawl_run.data).docs).iter_documents()}
    for first, second, kind in (("/dup1", "/dup2", "exact"), ("/near1", "/near2", "near")):
        u1, u2 = crawl_run.a.url(first), crawl_run.a.url(second)
        indexed = {u for u in (u1, u2) if u in docs}
        assert len(indexed) == 1, (first, indexed)
        original = indexed.pop()
        duplicate = u2 if original == u1 else u1
        assert rows[duplicate]["outcome"] == f"duplicate ({kind})"
        assert rows[duplicate]["dup_of"] == original
        assert sizes[original] == 2
    # The database knows the sizes written, so the next run's repair has nothing to read.
    db = CrawlDb(CrawlDir(crawl_run.data).db)
    try:
        assert db.stale_clusters() == {}
    finally:
        db.close()


def test_a_later_run_repairs_sizes_an_older_or_killed_run_left(crawl_run: CrawlRun, tmp_path: Path) -> None:
    data = tmp_path / "crawl"
    shutil.copytree(crawl_run.data, data)
    layout = CrawlDir(data)
    originals = {u: d for u, d in DocStore(layout.docs).documents_by_url(_doc_urls(crawl_run)).items()}
    grown = sorted(u for u, d in originals.items() if d.dup_cluster_size == 2)
    assert len(grown) == 2
    # A killed run: one original written again as size 1 after its duplicate was counted;
    # an older database: no size recorded for any URL.
    DocStore(layout.docs).append([replace(originals[grown[0]], dup_cluster_size=1)])
    db = CrawlDb(layout.db)
    try:
        db.forget_cluster_sizes()
        assert set(db.stale_clusters()) == set(grown)
    finally:
        db.close()
    summary = asyncio.run(Crawler(data, crawl_run.settings, seeds=[]).run())
    assert summary.fetches == 0
    sizes = {d.url: d.dup_cluster_size for d in DocStore(layout.docs).iter_documents()}
    assert [sizes[u] for u in grown] == [2, 2]
    db = CrawlDb(layout.db)
    try:
        assert db.stale_clusters() == {}
    finally:
        db.close()
    assert crawl_run.summary.duplicates == 2


def test_canonical_and_noindex(crawl_run: CrawlRun) -> None:
    rows = crawl_run.rows()
    docs = _doc_urls(crawl_run)
    alias, target = crawl_run.a.url("/canon-alias"), crawl_run.a.url("/canon-target")
    assert rows[alias]["outcome"] == "canonicalized" and rows[alias]["dup_of"] == target
    assert target in docs and alias not in docs
    assert crawl_run.a.url("/noindex") not in docs
    assert crawl_run.a.url("/via-noindex") in docs


def test_error_pages_and_bodies(crawl_run: CrawlRun) -> None:
    rows = crawl_run.rows()
    b = f"http://{crawl_run.b_authority}"
    assert crawl_run.b.recorder.paths().count("/err500") == 2
    assert (rows[b + "/err500"]["status"], rows[b + "/err500"]["http_status"]) == ("failed", 500)
    assert (rows[b + "/gone"]["status"], rows[b + "/gone"]["outcome"]) == ("done", "http 404")
    assert (
        rows[b + "/too-slow"]["status"] == "failed" and rows[b + "/too-slow"]["outcome"] == "error: timeout"
    )
    assert rows[b + "/big"]["outcome"] == "too large"
    assert rows[b + "/binary"]["outcome"] == "not html"
    loop = crawl_run.a.url("/loop1")
    assert (rows[loop]["status"], rows[loop]["outcome"]) == ("failed", f"error: redirect loop back to {loop}")
    # A loop is permanent: asked once, /loop1 -> /loop2 -> back, never retried.
    assert crawl_run.a.recorder.paths().count("/loop1") + crawl_run.a.recorder.paths().count("/loop2") <= 6
    assert rows[crawl_run.a.url("/to-b")]["outcome"] == "redirect"


def test_the_indexed_documents(crawl_run: CrawlRun) -> None:
    docs = {doc.url: doc for doc in DocStore(CrawlDir(crawl_run.data).docs).iter_documents()}
    a = crawl_run.a.url
    b = f"http://{crawl_run.b_authority}"
    expected_a_b = {
        a("/"),
        a("/a"),
        a("/b-page"),
        a("/from-sitemap"),
        a("/canon-target"),
        a("/via-noindex"),
        a("/latin"),
        a("/utf8-as-latin1"),
        b + "/",
        b + "/slow",
        b + "/rate",
        b + "/moved-target",
    }
    a_b = {u for u in docs if not u.startswith(crawl_run.d.url("/")) and "/dup" not in u and "/near" not in u}
    assert a_b == expected_a_b
    assert "Le café est très bon" in docs[a("/latin")].body
    assert "Une naïve façade" in docs[a("/utf8-as-latin1")].body
    home = docs[a("/")]
    assert home.title == "Home of A" and home.lang == "en" and home.host == "127.0.0.2"
    assert "Fixture web footer" not in home.body and "Home of A" in home.body
    assert a("/private/secret") in home.outlinks


def test_warc_holds_every_response(crawl_run: CrawlRun) -> None:
    files = sorted((CrawlDir(crawl_run.data).warc).glob("*.warc.gz"))
    assert files
    responses: list[str] = []
    for path in files:
        with open(path, "rb") as handle:
            for record in ArchiveIterator(handle):
                if record.rec_type in ("response", "revisit"):  # a retry with the same payload: revisit
                    responses.append(record.rec_headers.get_header("WARC-Target-URI"))
    assert len(responses) == crawl_run.summary.fetches
    assert crawl_run.a.url("/robots.txt") in responses and crawl_run.a.url("/latin") in responses


def test_link_graph_gives_anchor_text(crawl_run: CrawlRun) -> None:
    anchors = anchors_by_target(LinkGraphStore(CrawlDir(crawl_run.data).links).read_edges())
    assert anchors[crawl_run.a.url("/b-page")] == ["the b page"]
    assert "Host B" in anchors[f"http://{crawl_run.b_authority}/"]


def test_inspect_explains_a_url(crawl_run: CrawlRun) -> None:
    ua = crawl_run.settings.user_agent
    report = inspect_url(crawl_run.a.url("/private/secret#x"), crawl_run.data, user_agent=ua)
    assert (report.canonical_url, report.robots) == (crawl_run.a.url("/private/secret"), "disallowed")
    dup = inspect_url(crawl_run.a.url("/dup2"), crawl_run.data, user_agent=ua)
    assert set(dup.cluster) == {crawl_run.a.url("/dup1"), crawl_run.a.url("/dup2")}
    page = inspect_url(crawl_run.a.url("/a?utm_medium=x"), crawl_run.data, user_agent=ua)
    assert page.state is not None and page.state["outcome"] == "indexed"
    assert [h["http_status"] for h in page.history] == [200]


def test_inspect_command_json(crawl_run: CrawlRun) -> None:
    import json

    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(
        app, ["inspect", crawl_run.a.url("/near2?utm_source=x"), "--data", str(crawl_run.data), "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["canonical_url"] == crawl_run.a.url("/near2")
    assert report["robots"] == "allowed"
    assert set(report["cluster"]) == {crawl_run.a.url("/near1"), crawl_run.a.url("/near2")}
    assert [h["http_status"] for h in report["history"]] == [200]


def test_inspect_command_reads_as_labels_and_values(crawl_run: CrawlRun) -> None:
    import re

    from typer.testing import CliRunner

    from cli.main import app

    result = CliRunner().invoke(app, ["inspect", crawl_run.a.url("/dup2"), "--data", str(crawl_run.data)])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "Canonical URL" in text and "HTTP status" in text and "Same-content cluster" in text
    assert "UTC" in text and "Recrawl interval" in text
    for raw in ("http_status", "interval_s", "cluster written", "fetch_count", "86400.0"):
        assert raw not in text, raw
    assert not re.search(r"\b1[6-9]\d{8}\.\d+", text)  # no Unix times
