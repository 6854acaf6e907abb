"""``POST /v1/crawl/seeds`` refuses seeds on addresses the crawl's guard would never fetch.

It took 169.254.169.254, 10.0.0.5 and [fe80::1] and answered 200; the crawler then refused
them, rightly, where nobody who posted them would look. Now such a seed is a 400 naming it
and the setting that would allow it, and nothing of the request is queued.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from core.crawldir import CrawlDir
from core.settings import Settings
from core.types import Document, doc_id_for
from crawl.state.sqlite import CrawlDb
from retrieval.index.root import IndexRoot

KEY = "seeds-admin-key"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = IndexRoot(tmp_path_factory.mktemp("seeds") / "index")
    docs = [
        Document(doc_id=doc_id_for("http://a.test/"), url="http://a.test/", title="Seeds", body="seed page")
    ]
    root.publish(root.build(docs, shards=1))
    return root.root


def _post(index_dir: Path, crawl: Path, urls: list[str], **allow: Any) -> Any:
    settings = Settings.model_validate(
        {
            "api": {"admin_api_key": KEY, "crawl_data": str(crawl), "rate_limit_per_s": 0},
            "crawl": allow,
            "search": {"use_vectors": False},
        }
    )
    with TestClient(create_app(settings, index_dir=index_dir)) as client:
        return client.post("/v1/crawl/seeds", json={"urls": urls}, headers={"X-API-Key": KEY})


def _queued(crawl: Path) -> list[str]:
    if not CrawlDir(crawl).db.exists():
        return []
    db = CrawlDb(CrawlDir(crawl).db)
    try:
        return sorted(db.iter_urls())
    finally:
        db.close()


REFUSED = [
    ("http://169.254.169.254/latest/meta-data/", "link-local", "crawl.allowed_networks"),
    ("http://10.0.0.5:8080/", "private-network", "crawl.allow_private"),
    ("http://[fe80::1]/", "link-local", "crawl.allowed_networks"),
    ("http://127.0.0.1:9/", "loopback", "crawl.allow_loopback"),
    ("http://localhost:9/", "loopback", "crawl.allow_loopback"),  # a name that resolves there
]


@pytest.mark.parametrize(("seed", "kind", "setting"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_non_public_seed_is_400_naming_it_and_the_setting(
    tmp_path: Path, index_dir: Path, seed: str, kind: str, setting: str
) -> None:
    answer = _post(index_dir, tmp_path, ["http://seed.test/start", seed])
    assert answer.status_code == 400, answer.text
    error = answer.json()
    assert error["error"] == "bad_parameter"
    assert seed in error["detail"] and f"a {kind} address" in error["detail"] and setting in error["detail"]
    assert _queued(tmp_path) == []  # not even the good seed: the request is refused whole


def test_the_crawls_settings_let_them_through(tmp_path: Path, index_dir: Path) -> None:
    allowed = _post(
        index_dir,
        tmp_path,
        [seed for seed, _, _ in REFUSED],
        allow_loopback=True,
        allow_private=True,
        allowed_networks=["169.254.0.0/16", "fe80::/10"],
    )
    assert allowed.status_code == 200, allowed.text
    assert len(_queued(tmp_path)) == len(REFUSED)
    both = ["http://10.0.0.5:8080/", "http://127.0.0.1:9/"]
    private_only = _post(index_dir, tmp_path / "p", both, allow_private=True)
    assert private_only.status_code == 400  # private networks allowed, loopback still not
    assert "crawl.allow_loopback" in private_only.json()["detail"]


def test_a_public_or_unresolved_seed_is_queued(tmp_path: Path, index_dir: Path) -> None:
    """A name that does not resolve here is taken: the crawler, maybe elsewhere, decides."""
    answer = _post(index_dir, tmp_path, ["http://93.184.215.14/", "http://seed.test/start"])
    assert answer.status_code == 200, answer.text
    assert _queued(tmp_path) == ["http://93.184.215.14/", "http://seed.test/start"]
