"""A synthetic site for crawl benchmarks: N loopback hosts × P pages, served from memory.

Pages carry ~300 words of distinct filler text and 12 links (the next page, ten random
pages of the same host, one page of another host), so every page is reachable and
none is a near-duplicate of another. The listening sockets are bound in the parent
and shared by forked uvicorn workers (httptools), so two cores can serve.
"""

from __future__ import annotations

import multiprocessing
import random
import socket
from typing import Any

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "de", "fi", "gu", "ha", "jo")


def _words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(n))


def build_pages(authorities: list[str], pages_per_host: int, seed: int = 1) -> dict[tuple[int, str], bytes]:
    rng = random.Random(seed)
    pages: dict[tuple[int, str], bytes] = {}
    for h, _authority in enumerate(authorities):
        for i in range(pages_per_host):
            links = [f"/p{(i + 1) % pages_per_host}.html"]
            links += [f"/p{rng.randrange(pages_per_host)}.html" for _ in range(10)]
            other = authorities[rng.randrange(len(authorities))]
            links.append(f"http://{other}/p{rng.randrange(pages_per_host)}.html")
            anchors = "".join(f'<li><a href="{href}">{_words(rng, 3)}</a></li>' for href in links)
            html = (
                f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Page {h}-{i}</title>"
                f"<meta name='description' content='{_words(rng, 12)}'></head><body>"
                f"<nav><a href='/p0.html'>Home</a></nav><main><h1>Page {h}-{i}</h1>"
                f"<p>{_words(rng, 150)}</p><h2>{_words(rng, 4)}</h2><p>{_words(rng, 150)}</p>"
                f"<ul>{anchors}</ul></main><footer>Benchmark site</footer></body></html>"
            )
            path = "/" if i == 0 else f"/p{i}.html"
            pages[(h, path)] = html.encode()
            if i == 0:
                pages[(h, "/p0.html")] = html.encode()
    return pages


def _serve(
    sockets: list[socket.socket], pages: dict[tuple[int, str], bytes], index: dict[tuple[str, int], int]
) -> None:
    import uvicorn

    not_found = b"<html><body>not found</body></html>"

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        host = index.get(tuple(scope["server"]), -1)
        body = pages.get((host, scope["path"]))
        status = 200 if body is not None else 404
        body = body if body is not None else not_found
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/html; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    config = uvicorn.Config(
        app, log_level="error", access_log=False, lifespan="off", http="httptools", loop="uvloop"
    )
    uvicorn.Server(config).run(sockets=sockets)


class BenchSite:
    """``hosts`` loopback addresses 127.0.0.{first}.. each on its own port, ``workers`` processes."""

    def __init__(
        self, hosts: int = 20, pages_per_host: int = 250, *, first: int = 21, workers: int = 2
    ) -> None:
        self.sockets: list[socket.socket] = []
        for h in range(hosts):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((f"127.0.0.{first + h}", 0))
            sock.listen(1024)
            self.sockets.append(sock)
        self.authorities = [f"{s.getsockname()[0]}:{s.getsockname()[1]}" for s in self.sockets]
        # By address and port: two loopback addresses can be given the same free port, and
        # an index by port alone then served one host's pages on both (that crawl indexed
        # 250 fewer pages, every other page of the second host an exact duplicate).
        index = {s.getsockname(): h for h, s in enumerate(self.sockets)}
        self.pages = build_pages(self.authorities, pages_per_host)
        self.page_count = hosts * pages_per_host
        ctx = multiprocessing.get_context("fork")
        self.processes = [
            ctx.Process(target=_serve, args=(self.sockets, self.pages, index), daemon=True)
            for _ in range(workers)
        ]

    @property
    def seeds(self) -> list[str]:
        return [f"http://{a}/" for a in self.authorities]

    def __enter__(self) -> BenchSite:
        for process in self.processes:
            process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.terminate()
            process.join(timeout=5)
