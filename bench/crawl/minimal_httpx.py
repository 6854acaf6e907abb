"""The floor: a minimal asyncio + httpx + selectolax crawler (no politeness, no storage).

N workers share a queue; each fetches, extracts links with selectolax, joins and
defragments them with urllib, and queues the unseen ones whose host is a seed host.
Prints one JSON line: pages and elapsed seconds.

    python bench/crawl/minimal_httpx.py --concurrency 16 http://127.0.0.21:PORT/ ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from urllib.parse import urldefrag, urljoin, urlsplit

import httpx
from selectolax.lexbor import LexborHTMLParser


async def crawl(seeds: list[str], concurrency: int) -> dict[str, float]:
    hosts = {urlsplit(s).netloc for s in seeds}
    queue: asyncio.Queue[str] = asyncio.Queue()
    seen: set[str] = set(seeds)
    for seed in seeds:
        queue.put_nowait(seed)
    pages = 0
    started = time.perf_counter()
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def worker() -> None:
            nonlocal pages
            while True:
                url = await queue.get()
                try:
                    response = await client.get(url)
                    if response.status_code == 200 and "html" in response.headers.get("content-type", ""):
                        pages += 1
                        tree = LexborHTMLParser(response.text)
                        if tree.body is not None:
                            tree.body.text(separator=" ")
                        for anchor in tree.css("a[href]"):
                            link = urldefrag(urljoin(url, anchor.attributes.get("href") or ""))[0]
                            if link not in seen and urlsplit(link).netloc in hosts:
                                seen.add(link)
                                queue.put_nowait(link)
                except httpx.HTTPError:
                    pass
                finally:
                    queue.task_done()

        workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
        await queue.join()
        for task in workers:
            task.cancel()
    return {"pages": pages, "elapsed_s": time.perf_counter() - started}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("seeds", nargs="+")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(crawl(args.seeds, args.concurrency))))


if __name__ == "__main__":
    main()
