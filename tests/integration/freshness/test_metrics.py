"""Freshness metrics: an index step's lag, backlog and deletions, scraped over HTTP."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import httpx
from prometheus_client import generate_latest, start_http_server

from api.metrics import REGISTRY as SERVICE_REGISTRY
from core.crawldir import CrawlDir
from core.deletions import DeletionLog, Removal
from core.docstore import DocStore
from retrieval.index.freshness_metrics import REGISTRY
from retrieval.index.incremental import IncrementalIndexer
from tests.fixtures.docs import make_doc


def _value(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match is not None, name
    return float(match[1])


def _scrape(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text


def test_a_step_shows_its_lag_backlog_and_deletions(tmp_path: Path) -> None:
    data = tmp_path / "crawl"
    store = DocStore(CrawlDir(data).docs)
    now = time.time()
    docs = [
        make_doc(f"http://site.test/{i}", f"Page {i}", f"freshness page {i}", fetched_at=now)
        for i in range(6)
    ]
    store.append(docs[:4])
    indexer = IncrementalIndexer(data, tmp_path / "index", shards=1)
    indexer.compact()
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=REGISTRY)
    port = server.server_address[1]
    try:
        before = _scrape(port)
        fetched = time.time() - 3.0
        store.append([dataclasses.replace(d, fetched_at=fetched) for d in docs[4:]])
        DeletionLog(CrawlDir(data).deletions).record(
            [Removal(docs[0].doc_id, docs[0].url, "http 404", time.time())]
        )
        report = indexer.step()
        assert report is not None and (report.indexed, report.removed) == (2, 1)
        after = _scrape(port)
    finally:
        server.shutdown()
    count = "trawl_crawl_to_searchable_seconds_count"
    assert _value(after, count) - _value(before, count) == 2
    lag_sum = _value(after, "trawl_crawl_to_searchable_seconds_sum") - _value(
        before, "trawl_crawl_to_searchable_seconds_sum"
    )
    assert 6.0 <= lag_sum < 60.0  # two documents fetched 3 s before the step
    assert _value(after, "trawl_unindexed_backlog") == 2
    assert (
        _value(after, "trawl_deletions_applied_total") - _value(before, "trawl_deletions_applied_total") == 1
    )
    assert indexer.step() is None
    assert _value(generate_latest(REGISTRY).decode(), "trawl_unindexed_backlog") == 0
    service = generate_latest(SERVICE_REGISTRY).decode()  # the service's /metrics shows the same figures
    assert _value(service, "trawl_deletions_applied_total") == _value(
        generate_latest(REGISTRY).decode(), "trawl_deletions_applied_total"
    )
