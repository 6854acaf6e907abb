"""Title-only variants: seeded, about half, judgments untouched."""

from __future__ import annotations

import json
from pathlib import Path

from training.title_only import title_only_variant


def make_collection(root: Path, n: int = 200) -> Path:
    (root / "qrels").mkdir(parents=True)
    rows = [{"_id": str(i), "title": f"title {i}", "text": f"body of document {i}"} for i in range(n)]
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "document"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\t3\t1\n")
    return root


def bodies(root: Path) -> dict[str, str]:
    lines = (root / "corpus.jsonl").read_text().splitlines()
    return {r["_id"]: r["text"] for r in map(json.loads, lines)}


def test_half_the_bodies_go_the_same_way_for_a_seed(tmp_path: Path) -> None:
    source = make_collection(tmp_path / "src")
    a = title_only_variant(source, tmp_path / "a", seed=1)
    title_only_variant(source, tmp_path / "b", seed=1)
    title_only_variant(source, tmp_path / "c", seed=2)
    assert 80 <= a.title_only <= 120 and a.documents == 200
    assert bodies(tmp_path / "a") == bodies(tmp_path / "b") != bodies(tmp_path / "c")
    kept = {i: t for i, t in bodies(tmp_path / "a").items() if t}
    assert all(t == f"body of document {i}" for i, t in kept.items())
    assert (tmp_path / "a" / "qrels" / "test.tsv").read_text() == (source / "qrels" / "test.tsv").read_text()


def test_short_documents_keep_their_first_words_and_the_same_title_only_half(tmp_path: Path) -> None:
    source = make_collection(tmp_path / "src")
    title_only_variant(source, tmp_path / "title", seed=1)
    short = title_only_variant(source, tmp_path / "short", seed=1, body_words=2)
    titled, cut = bodies(tmp_path / "title"), bodies(tmp_path / "short")
    assert {i for i, t in cut.items() if not t} == {i for i, t in titled.items() if not t}
    assert short.title_only == sum(1 for t in titled.values() if not t)
    assert all(cut[i] == "body of" for i, t in titled.items() if t)
