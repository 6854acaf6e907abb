"""Near-identical results (same SimHash cluster) are shown once per page, with a count."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from core.settings import Settings
from core.types import Document, doc_id_for
from retrieval.index.build import build_index
from retrieval.query.results import collapsed_into

BASE = 0x0F0F_F0F0_1234_ABCD


def doc(url: str, body: str, simhash: int) -> Document:
    return Document(doc_id=doc_id_for(url), url=url, title=url.rsplit("/", 1)[-1], body=body, simhash=simhash)


def test_collapsed_into_needs_a_known_hash_within_three_bits() -> None:
    assert collapsed_into(BASE ^ 0b111, [BASE]) == 0
    assert collapsed_into(BASE ^ 0b1111, [BASE]) is None
    assert collapsed_into(0, [0]) is None  # unknown hashes never collapse


def test_the_page_shows_one_of_a_near_duplicate_cluster(tmp_path: Path) -> None:
    docs = [
        doc("http://a.test/walrus", "walrus walrus tusks and ice floes", BASE),
        doc("http://b.test/walrus-copy", "walrus tusks and ice floes", BASE ^ 0b101),
        doc("http://c.test/walrus-mirror", "walrus tusks ice", BASE ^ 0b1),
        doc("http://d.test/other", "walrus on a different page entirely", ~BASE & (2**64 - 1)),
    ]
    index = tmp_path / "index"
    build_index(docs, index)
    settings = Settings(data_dir=tmp_path / "data")
    with TestClient(create_app(settings, index_dir=index)) as client:
        body = client.get("/v1/search", params={"q": "walrus", "ranker": "bm25"}).json()
        page = client.get("/", params={"q": "walrus", "ranker": "bm25"}).text
    urls = [r["url"] for r in body["results"]]
    assert urls == ["http://a.test/walrus", "http://d.test/other"]
    assert [r["similar"] for r in body["results"]] == [2, 0]
    assert "2 similar results hidden" in page
