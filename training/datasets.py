"""Loaders for BEIR-layout collections: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``."""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.errors import ConfigError
from core.types import DocId, Document, doc_id_for

DOCUMENTS_VERSION = 4
"""Bumped when ``iter_documents`` changes what it yields (2: PageRank; 3: metadata headings
and anchors, less leaked anchors; 4: a crawl-derived page keeps its own URL), so cached
indexes rebuild."""

Qrels = dict[str, dict[str, int]]
"""query id → document external id → relevance grade."""


@dataclass(frozen=True, slots=True)
class BeirDataset:
    """A judged collection on disk. Nothing is loaded until asked for."""

    root: Path

    @property
    def name(self) -> str:
        return self.root.resolve().name

    @classmethod
    def open(cls, root: Path) -> BeirDataset:
        root = Path(root)
        missing = [p for p in ("corpus.jsonl",) if not (root / p).exists()]
        if missing:
            raise ConfigError(
                f"{root} is not a BEIR collection: {', '.join(missing)} is missing "
                "(expected corpus.jsonl, queries.jsonl and qrels/test.tsv)."
            )
        return cls(root)

    def fingerprint(self) -> str:
        """Changes when the corpus file changes: keys cached indexes."""
        stat = (self.root / "corpus.jsonl").stat()
        raw = f"{self.root.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{DOCUMENTS_VERSION}"
        return hashlib.blake2b(raw.encode(), digest_size=6).hexdigest()

    def doc_id(self, external_id: str) -> DocId:
        return doc_id_for(f"beir:{self.name}:{external_id}")

    def leaked_anchors(self) -> dict[str, set[str]]:
        """Page id → anchor texts that are some judged query's own anchor for that page.

        From ``leakage.jsonl`` (crawl-derived sets): such an anchor must not feed the
        page's anchor evidence, or the query would find its page by reading its own label.
        """
        path = self.root / "leakage.jsonl"
        out: dict[str, set[str]] = {}
        if not path.exists():
            return out
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    out.setdefault(str(record["target"]), set()).add(_anchor_key(str(record["anchor_key"])))
        return out

    def folds(self) -> dict[str, int] | None:
        """Query id → fold from ``folds.tsv`` when the collection fixes its own folds, else None."""
        path = self.root / "folds.tsv"
        if not path.exists():
            return None
        out: dict[str, int] = {}
        with path.open(encoding="utf-8") as handle:
            for row in csv.reader(handle, delimiter="\t"):
                if len(row) >= 2 and row[1].strip().isdigit():
                    out[row[0]] = int(row[1])
        return out

    def iter_documents(self) -> Iterator[Document]:
        """Every record as a Document, with its PageRank from the collection's link graph
        (cisi's ``metadata.links``; uniform 1.0 where a collection has no links), so an
        index of the collection serves the same static values training sees.

        ``metadata.headings`` and ``metadata.anchors`` (crawl-derived sets) are indexed
        as the crawl indexes them, less the anchors :meth:`leaked_anchors` names, and
        ``metadata.link_words`` gives a page its quality (``retrieval.index.page_quality``).
        """
        # lazy: loads scipy and polars; opening a collection or reading its queries stays light
        from training.pagerank import beir_pagerank

        pagerank = beir_pagerank(self.root)
        leaked = self.leaked_anchors()
        with (self.root / "corpus.jsonl").open(encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    external_id = str(record["_id"])
                except (json.JSONDecodeError, KeyError) as exc:
                    raise ConfigError(
                        f"{self.root / 'corpus.jsonl'} line {line_no} is not a BEIR record: {exc}"
                    ) from exc
                metadata = record.get("metadata") or {}
                drop = leaked.get(external_id, set())
                anchors = tuple(
                    str(a) for a in metadata.get("anchors") or () if _anchor_key(str(a)) not in drop
                )
                doc_id = self.doc_id(external_id)
                yield Document(
                    doc_id=doc_id,
                    url=document_url(self.name, external_id),
                    title=str(record.get("title") or ""),
                    body=str(record.get("text") or ""),
                    headings=tuple(str(h) for h in metadata.get("headings") or ()),
                    anchors=anchors,
                    host=self.name,
                    lang="en",
                    filetype="txt",
                    external_id=external_id,
                    pagerank=pagerank.get(doc_id, 1.0),
                    link_words=int(metadata.get("link_words") or 0),
                )

    def queries(self) -> dict[str, str]:
        out: dict[str, str] = {}
        with (self.root / "queries.jsonl").open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    out[str(record["_id"])] = str(record["text"])
        return out

    def qrels(self, split: str = "test") -> Qrels:
        qrels: Qrels = {}
        with (self.root / "qrels" / f"{split}.tsv").open(encoding="utf-8") as handle:
            reader = csv.reader(handle, delimiter="\t")
            for row in reader:
                if len(row) < 3 or not row[2].strip().lstrip("-").isdigit():
                    continue  # header or malformed line
                qrels.setdefault(row[0], {})[row[1]] = int(row[2])
        return qrels

    def judged_queries(self) -> dict[str, str]:
        """Queries that have at least one judgment, in query-file order."""
        qrels = self.qrels()
        return {qid: text for qid, text in self.queries().items() if qid in qrels}


def document_url(collection: str, external_id: str) -> str:
    """The URL a collection's document is indexed under.

    A crawl-derived page's id is the URL it was crawled from, and that URL is what the
    crawl indexes: URL features (``url_depth``) must read it, not a wrapper, or a model
    trained here sees depths the served crawl never has (``beir://pydocs/http://h/a.html``
    is 3 segments deeper than ``http://h/a.html``). Other ids get ``beir://NAME/ID``.
    """
    if external_id.startswith(("http://", "https://")):
        return external_id
    return f"beir://{collection}/{external_id}"


def _anchor_key(text: str) -> str:
    """The key the crawl-derived set compares anchor texts by (its ``anchor_key``)."""
    # lazy: loads polars, which opening a collection never needs
    from training.crawl_dataset import normalize

    return normalize(text)
