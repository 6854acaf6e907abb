"""API drills against a running ``trawl serve``: a forged IndexNow proof of ownership, a URL
too long for the HTTP parser, seeds on private and link-local addresses.

The IndexNow sites are recording uvicorn servers on 127.0.0.1, beside Trawl itself, so
"another port of the same host" is Trawl's own search, as in issue 51's forgery.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from bench.faults.harness import Drill, Outcome, served
from core.crawldir import CrawlDir
from crawl.state.records import NewUrl
from crawl.state.sqlite import CrawlDb
from tests.fixtures.crawl.web import HostServer, Site, html_page
from tests.fixtures.docs import numbered_index

KEY = "a1b2c3d4-fault-drill"
ADMIN_KEY = "fault-drill-admin"
NO_VECTORS = {"TRAWL_SEARCH__USE_VECTORS": "false"}


def _index(folder: Path) -> Path:
    return numbered_index(folder / "index", ["a page of the fault drill", "another page"])


def _crawling(crawl: Path, *authorities: str) -> None:
    """The crawl in ``crawl`` holds these hosts' front pages (IndexNow takes crawled hosts only)."""
    db = CrawlDb(CrawlDir(crawl).db)
    try:
        inserts = [NewUrl(f"http://{a}/", a, 0, 1.0) for a in authorities]
        db.apply(inserts=inserts, leases=[], updates=[], hosts=[], now=1.0)
    finally:
        db.close()


def _queued(crawl: Path) -> set[str]:
    if not CrawlDir(crawl).db.exists():
        return set()
    db = CrawlDb(CrawlDir(crawl).db, readonly=True)
    try:
        return set(db.iter_urls())
    finally:
        db.close()


def _indexnow() -> Drill:
    def run(folder: Path) -> Outcome:
        site, other = Site(), Site()
        site.page("/about.html", html_page("About", f"Our IndexNow key is {KEY}."))  # no key file
        other.raw(f"/{KEY}.txt", KEY.encode(), content_type="text/plain")  # a real one, of another port
        crawl = folder / "crawl"
        closed = socket.socket()  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        s, o = HostServer(site).start(), HostServer(other).start()
        try:
            closed_at = f"127.0.0.1:{closed.getsockname()[1]}"
            _crawling(crawl, s.authority, o.authority, closed_at)
            before = _queued(crawl)
            settings = {"TRAWL_API__CRAWL_DATA": str(crawl), "TRAWL_CRAWL__ALLOW_LOOPBACK": "true"}
            with served(_index(folder), folder / "serve.log", **settings, **NO_VECTORS) as svc:
                trawl_origin = f"http://127.0.0.1:{svc.port}"
                forged = [
                    f"{trawl_origin}/v1/search?q={KEY}",  # issue 51's: Trawl's own search echoes the key
                    f"{trawl_origin}/?q={KEY}",  # its search page, likewise
                    o.url(f"/{KEY}.txt"),  # a true key file, of another port
                    s.url("/about.html"),  # a page of the site that merely contains the key
                ]
                notice = {"host": "127.0.0.1", "key": KEY, "urlList": [s.url("/new")]}
                answers = [
                    svc.client.post("/indexnow", json={**notice, "keyLocation": where}) for where in forged
                ]
                probes = {
                    port: svc.client.get("/indexnow", params={"url": f"http://{at}/x.html", "key": KEY})
                    for at, port in ((s.authority, str(s.port)), (closed_at, closed_at.split(":")[1]))
                }
                genuine = svc.client.post(
                    "/indexnow", json={"host": o.authority, "key": KEY, "urlList": [o.url("/fresh.html")]}
                )
        finally:
            s.stop()
            o.stop()
            closed.close()
        queued = _queued(crawl) - before
        codes = sorted(a.status_code for a in answers)
        refused = all(c in (403, 422) for c in codes)
        seen = [
            (a.status_code, a.json()["error"], a.json()["detail"].replace(p, "PORT"))
            for p, a in probes.items()
        ]
        alike = seen[0] == seen[1] and seen[0][:2] == (403, "key_not_valid")
        only_genuine = queued == {o.url("/fresh.html")}
        said = (
            f"forged proofs answered {', '.join(map(str, codes))}; "
            f"{'nothing of theirs queued' if not queued - {o.url('/fresh.html')} else 'FORGED URLS QUEUED'}; "
            f"closed port and missing key file: {'one identical 403' if alike else f'DIFFERENT: {seen}'}; "
            f"a true key file: {genuine.status_code}"
        )
        return Outcome(refused and alike and only_genuine and genuine.status_code == 200, said)

    return Drill(
        "forged IndexNow proof of ownership",
        "every forgery refused (422 off the URLs' origin or with a query, 403 not the key), nothing "
        "queued; a closed port and a missing key file get one identical 403; a true key file is taken",
        run,
    )


def _raw_get(port: int, target: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of ``GET target`` sent by hand (HTTP clients refuse such URLs)."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as conn:
        conn.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: drill.test\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def _too_long() -> Drill:
    def run(folder: Path) -> Outcome:
        with served(_index(folder), folder / "serve.log", **NO_VECTORS) as svc:
            answers = [_raw_get(svc.port, b"/v1/search?q=" + b"x" * n) for n in (70_000, 2_000_000)]
            alive = _raw_get(svc.port, b"/healthz")[0] == 200

        def json_414(status: int, headers: dict[str, str], body: bytes) -> bool:
            if status != 414 or headers.get("content-type") != "application/json":
                return False
            return bool(json.loads(body).get("error") == "uri_too_long")

        good = [json_414(*a) for a in answers]
        said = (
            "70 KB and 2 MB URLs: "
            + ", ".join(f"{a[0]} {a[1].get('content-type', '?')}" for a in answers)
            + (" uri_too_long" if all(good) else "")
            + f"; {'the server carries on' if alive else 'SERVER GONE'}"
        )
        return Outcome(all(good) and alive, said)

    return Drill(
        "URL over 65,535 bytes",
        "414 in the API's JSON shape (`uri_too_long`), not uvicorn's plain-text 400; the server carries on",
        run,
    )


PRIVATE = (
    ("http://169.254.169.254/latest/meta-data/", "crawl.allowed_networks"),
    ("http://10.0.0.5:8080/", "crawl.allow_private"),
    ("http://[fe80::1]/", "crawl.allowed_networks"),
    ("http://127.0.0.1:9/", "crawl.allow_loopback"),
)
PUBLIC = "http://93.184.215.14/"
"""An address literal: queued without a name lookup (nothing is fetched: no crawl runs)."""


def _seeds() -> Drill:
    def run(folder: Path) -> Outcome:
        crawl = folder / "crawl"
        settings = {"TRAWL_API__CRAWL_DATA": str(crawl), "TRAWL_API__ADMIN_API_KEY": ADMIN_KEY}
        with served(_index(folder), folder / "serve.log", **settings, **NO_VECTORS) as svc:

            def post(urls: list[str]) -> Any:
                admin = {"X-API-Key": ADMIN_KEY}
                return svc.client.post("/v1/crawl/seeds", json={"urls": urls}, headers=admin)

            refused = [(seed, setting, post([PUBLIC, seed])) for seed, setting in PRIVATE]
            nothing = _queued(crawl)
            public = post([PUBLIC])
        named = [
            r.status_code == 400 and r.json()["error"] == "bad_parameter" and seed in r.json()["detail"]
            and setting in r.json()["detail"]
            for seed, setting, r in refused
        ]  # fmt: skip
        queued = _queued(crawl)
        said = (
            f"{sum(named)}/{len(PRIVATE)} private, link-local or loopback seeds 400 naming the seed and "
            f"the setting; {'nothing queued' if not nothing else 'SOME QUEUED'}; "
            f"a public seed: {public.status_code}{' queued' if queued == {PUBLIC} else ''}"
        )
        return Outcome(all(named) and not nothing and public.status_code == 200 and queued == {PUBLIC}, said)

    return Drill(
        "private seeds through `POST /v1/crawl/seeds`",
        "400 naming the seed and the setting that would allow it, nothing of the request queued; "
        "a public seed is taken",
        run,
    )


def drills() -> list[Drill]:
    return [_indexnow(), _too_long(), _seeds()]
