"""Scrapy peer for bench_crawl.py (run with /tmp/scrapy-venv/bin/python; never a Trawl dependency).

Same job as minimal_httpx.py: follow every link whose host is a seed host, parse each
page's text and links; dupefilter on, robots off, no delay. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time
from urllib.parse import urlsplit

import scrapy
from scrapy.crawler import CrawlerProcess


class SiteSpider(scrapy.Spider):
    name = "bench"

    def __init__(self, seeds: list[str], **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.start_urls = seeds
        self.hosts = {urlsplit(s).netloc for s in seeds}
        self.pages = 0

    def parse(self, response):  # noqa: ANN001, ANN201
        self.pages += 1
        response.xpath("//body//text()").getall()
        for href in response.css("a::attr(href)").getall():
            url = response.urljoin(href)
            if urlsplit(url).netloc in self.hosts:
                yield scrapy.Request(url, callback=self.parse)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("seeds", nargs="+")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": args.concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": args.concurrency,
            "DOWNLOAD_DELAY": 0,
            "ROBOTSTXT_OBEY": False,
            "LOG_LEVEL": "ERROR",
            "TELNETCONSOLE_ENABLED": False,
            "COOKIES_ENABLED": False,
            "RETRY_ENABLED": False,
        }
    )
    crawler = process.create_crawler(SiteSpider)
    started = time.perf_counter()
    process.crawl(crawler, seeds=args.seeds)
    process.start()
    print(json.dumps({"pages": crawler.spider.pages, "elapsed_s": time.perf_counter() - started}))


if __name__ == "__main__":
    main()
