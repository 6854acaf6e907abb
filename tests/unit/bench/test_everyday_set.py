"""The hand-judged everyday set: its judgments parse, and the builder writes a BEIR collection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.relevance.everyday_set import JUDGMENTS, build, read_judgments
from training.datasets import BeirDataset


def write_corpus(directory: Path, pages: list[str]) -> Path:
    directory.mkdir(parents=True)
    rows = [{"_id": f"http://127.0.0.1:8099/{p}", "title": p, "text": f"text of {p}"} for p in pages]
    (directory / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return directory


def test_the_packaged_judgments_have_a_best_page_for_every_query() -> None:
    judged = read_judgments(JUDGMENTS)
    assert len(judged) >= 40
    assert all(2 in pages.values() for pages in judged.values())
    pages = [page for judged_pages in judged.values() for page in judged_pages]
    assert all(page.endswith(".html") and not page.startswith("/") for page in pages)


def test_build_writes_queries_and_graded_qrels_over_the_corpus_urls(tmp_path: Path) -> None:
    judgments = tmp_path / "judged.tsv"
    judgments.write_text(
        "# comment\nasyncio event loop\tlibrary/asyncio-eventloop.html\t2\n"
        "asyncio event loop\tlibrary/asyncio.html\t1\npathlib glob\tlibrary/pathlib.html\t2\n",
        encoding="utf-8",
    )
    corpus = write_corpus(
        tmp_path / "crawl", ["library/asyncio-eventloop.html", "library/asyncio.html", "library/pathlib.html"]
    )
    out = tmp_path / "out"
    assert build(corpus, out, judgments) == (2, "http://127.0.0.1:8099/")
    dataset = BeirDataset.open(out)
    texts = dataset.queries()
    qrels = dataset.qrels()
    by_text = {texts[q]: judged for q, judged in qrels.items()}
    assert by_text["asyncio event loop"] == {
        "http://127.0.0.1:8099/library/asyncio-eventloop.html": 2,
        "http://127.0.0.1:8099/library/asyncio.html": 1,
    }
    assert by_text["pathlib glob"] == {"http://127.0.0.1:8099/library/pathlib.html": 2}


def test_a_judged_page_missing_from_the_corpus_is_refused(tmp_path: Path) -> None:
    judgments = tmp_path / "judged.tsv"
    judgments.write_text("pathlib glob\tlibrary/pathlib.html\t2\n", encoding="utf-8")
    corpus = write_corpus(tmp_path / "crawl", ["library/os.html"])
    with pytest.raises(SystemExit, match="library/pathlib.html"):
        build(corpus, tmp_path / "out", judgments)


def test_a_malformed_judgment_line_names_its_line(tmp_path: Path) -> None:
    judgments = tmp_path / "judged.tsv"
    judgments.write_text("pathlib glob\tlibrary/pathlib.html\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=":1:"):
        read_judgments(judgments)
