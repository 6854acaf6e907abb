"""Blocking a host or a URL pattern takes its indexed pages out of search at the next step."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from cli.main import app as cli
from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import Settings
from core.types import Document, doc_id_for
from crawl.state.records import NewUrl
from crawl.state.sqlite import CrawlDb
from retrieval.index.incremental import IncrementalIndexer
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService

KEY = "block-admin-key"
URLS = [
    "http://a.test/1",
    "http://a.test/private/2",
    "http://spam.test/3",
    "http://www.spam.test/4",
]


def _crawl(data: Path) -> None:
    docs = [
        Document(
            doc_id=doc_id_for(u), url=u, title=f"Page {i}", body=f"glacier moraine page {i}", fetched_at=100.0
        )
        for i, u in enumerate(URLS)
    ]
    DocStore(CrawlDir(data).docs).append(docs)
    db = CrawlDb(CrawlDir(data).db)
    db.apply(
        inserts=[NewUrl(u, u.split("/")[2], 0, 1.0) for u in URLS], leases=[], updates=[], hosts=[], now=100.0
    )
    db.close()


def _found(service: SearchService) -> set[str]:
    service.generations.refresh()
    return {h.url for h in service.search(SearchRequest("glacier moraine", size=10, spell=False)).hits}


def test_blocking_by_cli_and_admin_api_leaves_search_with_its_reason(tmp_path: Path) -> None:
    data, root = tmp_path / "crawl", tmp_path / "index"
    _crawl(data)
    indexer = IncrementalIndexer(data, root)
    indexer.compact()
    service = SearchService.open(root)
    assert _found(service) == set(URLS)
    runner = CliRunner()

    added = runner.invoke(cli, ["block", "add", "spam.test", "--data", str(data), "--reason", "link farm"])
    assert added.exit_code == 0, added.output
    report = indexer.step()
    assert report is not None and report.removed == 2
    assert _found(service) == {URLS[0], URLS[1]}  # the host and its subdomains, without a recrawl

    listed = runner.invoke(cli, ["block", "list", "--data", str(data), "--json"])
    assert [(r["kind"], r["value"], r["reason"]) for r in json.loads(listed.stdout)] == [
        ("host", "spam.test", "link farm")
    ]
    inspected = runner.invoke(cli, ["inspect", URLS[3], "--data", str(data), "--index", str(root), "--json"])
    assert inspected.exit_code == 0, inspected.output
    payload = json.loads(inspected.stdout)
    assert payload["blocked"] == "blocked by the operator (host spam.test): link farm"
    assert payload["freshness"]["state"] == "removed"
    assert payload["freshness"]["reason"] == payload["blocked"]
    assert payload["freshness"]["published_at"] >= time.time() - 60

    settings = Settings.model_validate(
        {
            "api": {"admin_api_key": KEY, "crawl_data": str(data), "rate_limit_per_s": 0},
            "search": {"use_vectors": False},
        }
    )
    with TestClient(create_app(settings, index_dir=root)) as client:
        body = {"value": "http://a.test/private/*", "reason": "legal request"}
        assert client.post("/v1/admin/blocks", json=body).status_code == 401
        posted = client.post("/v1/admin/blocks", json=body, headers={"X-API-Key": KEY})
        assert posted.status_code == 200, posted.text
        assert posted.json()["removed"] == 1 and posted.json()["rule"]["kind"] == "pattern"
        rules = client.get("/v1/admin/blocks", headers={"X-API-Key": KEY}).json()
        assert {r["value"]: r["reason"] for r in rules} == {
            "spam.test": "link farm",
            "http://a.test/private/*": "legal request",
        }
        indexer.step()
        assert _found(service) == {URLS[0]}
        left = client.delete("/v1/admin/blocks", params={"value": "spam.test"}, headers={"X-API-Key": KEY})
        assert [r["value"] for r in left.json()] == ["http://a.test/private/*"]
        assert (
            client.delete(
                "/v1/admin/blocks", params={"value": "spam.test"}, headers={"X-API-Key": KEY}
            ).status_code
            == 400
        )

    # Unblocked pages come back when they are fetched again.
    DocStore(CrawlDir(data).docs).append(
        [
            Document(
                doc_id=doc_id_for(URLS[2]),
                url=URLS[2],
                title="Page 2",
                body="glacier moraine again",
                fetched_at=time.time() + 1,
            )
        ]
    )
    indexer.step()
    assert _found(service) == {URLS[0], URLS[2]}
    service.close()
