"""`trawl dataset from-crawl` over a real docstore and link graph: a collection BeirDataset loads."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.linkgraph import Edge, LinkGraphStore
from core.types import Document, doc_id_for
from retrieval.index.forward import url_depth
from training.crawl_dataset import build_crawl_dataset
from training.datasets import BeirDataset, document_url

HOST = "http://site.test"
NAMES = ("intro", "tutorial", "sockets", "threads", "files", "errors", "unicode", "regex")


def _crawl(root: Path) -> Path:
    """A crawl of eight pages: a footer link on every page, content links between some."""
    crawl = CrawlDir(root / "crawl")
    urls = {name: f"{HOST}/{name}.html" for name in NAMES}
    DocStore(crawl.docs).append(
        Document(
            doc_id_for(u),
            u,
            f"{n.title()} Guide | Example Site",
            f"All about {n}.",
            headings=(f"{n} basics",),
        )
        for n, u in urls.items()
    )
    links = LinkGraphStore(crawl.links)
    links.append(Edge(u, urls["intro"], "Example Site home") for u in urls.values())
    links.append(
        [
            Edge(urls["intro"], urls["sockets"], "network sockets"),
            Edge(urls["tutorial"], urls["sockets"], "network sockets"),
            Edge(urls["files"], urls["threads"], "network sockets"),
            Edge(urls["intro"], urls["regex"], "here"),
            Edge(urls["errors"], urls["unicode"], "text encodings"),
        ]
    )
    return crawl.root


def _tsv(path: Path) -> list[list[str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.reader(handle, delimiter="\t"))[1:]


def test_build_writes_a_beir_collection_with_folds_and_leakage(tmp_path: Path) -> None:
    data = _crawl(tmp_path)
    report = build_crawl_dataset(data, tmp_path / "site", seed=0)
    dataset = BeirDataset.open(tmp_path / "site")

    documents = list(dataset.iter_documents())
    corpus_ids = {doc.external_id for doc in documents}
    assert corpus_ids == {f"{HOST}/{n}.html" for n in NAMES}
    # Indexed under the URL the crawl indexes them under, so URL features read as served.
    assert {doc.url for doc in documents} == corpus_ids
    assert {url_depth(doc.url) for doc in documents} == {1}
    qrels = dataset.qrels()
    queries = dataset.queries()
    assert set(qrels) == set(queries) == set(dataset.judged_queries())
    assert {d for judged in qrels.values() for d in judged} <= corpus_ids
    texts = {text: qid for qid, text in queries.items()}
    assert "Example Site home" not in texts and "here" not in texts
    assert qrels[texts["Sockets Guide"]] == {f"{HOST}/sockets.html": 2}
    assert qrels[texts["network sockets"]] == {f"{HOST}/sockets.html": 2, f"{HOST}/threads.html": 1}
    assert report.site_suffix == " | Example Site"
    assert report.queries_by_kind == {"title": 8, "anchor": 2, "heading": 8}

    folds = {qid: int(fold) for qid, fold in _tsv(tmp_path / "site" / "folds.tsv")}
    assert set(folds) == set(queries)
    page_folds: dict[str, set[int]] = {}
    for qid, judged in qrels.items():
        for doc in judged:
            page_folds.setdefault(doc, set()).add(folds[qid])
    assert all(len(f) == 1 for f in page_folds.values())

    leakage = [json.loads(line) for line in (tmp_path / "site" / "leakage.jsonl").read_text().splitlines()]
    assert {(r["query_id"], r["target"], tuple(r["source_urls"])) for r in leakage} == {
        (texts["network sockets"], f"{HOST}/sockets.html", (f"{HOST}/intro.html", f"{HOST}/tutorial.html")),
        (texts["network sockets"], f"{HOST}/threads.html", (f"{HOST}/files.html",)),
        (texts["text encodings"], f"{HOST}/unicode.html", (f"{HOST}/errors.html",)),
    }


def test_build_is_deterministic_and_the_command_reports_it(tmp_path: Path) -> None:
    data = _crawl(tmp_path)
    build_crawl_dataset(data, tmp_path / "a", seed=7)
    result = CliRunner().invoke(
        app, ["dataset", "from-crawl", "--data", str(data), "--out", str(tmp_path / "b"), "--seed", "7"]
    )
    assert result.exit_code == 0, result.output
    files = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files == [
        "corpus.jsonl",
        "dataset.json",
        "folds.tsv",
        "leakage.jsonl",
        "qrels/test.tsv",
        "queries.jsonl",
    ]
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert "queries: anchor" in result.output


def test_a_directory_without_a_docstore_is_refused(tmp_path: Path) -> None:
    from core.errors import ConfigError

    with pytest.raises(ConfigError, match="has no docstore"):
        build_crawl_dataset(tmp_path, tmp_path / "out")


def test_ids_that_are_not_urls_get_a_collection_url() -> None:
    assert document_url("cisi", "12") == "beir://cisi/12"
    assert url_depth(document_url("cisi", "12")) == 1
    assert document_url("pydocs", "https://docs.test/library/os.html") == "https://docs.test/library/os.html"
