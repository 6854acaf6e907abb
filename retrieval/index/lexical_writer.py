"""Writes lexical shards: a fresh one from documents, or in-place updates of a built one.

Each document is analysed once here (:mod:`retrieval.text.tokenizer`) for Tantivy's
fields, and its feature text goes to the shard's forward index
(:mod:`retrieval.index.forward`) alongside. The manifest is written at commit.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import tantivy

from core.atomic import write_text
from core.errors import ManifestError
from core.types import Document
from retrieval.index.checksums import from_json, record
from retrieval.index.collection_stats import BALLAST_TOKEN
from retrieval.index.forward import ForwardWriter, mark_stale
from retrieval.index.integrity import lexical_files, lexical_record
from retrieval.index.layout import forward_dir, forward_stale, lexical_manifest
from retrieval.index.lexical import LexicalShard
from retrieval.index.lexical_schema import (
    FORMAT_VERSION,
    LENGTH_FIELDS,
    MAX_BODY_CHARS,
    MAX_HEADINGS_CHARS,
    build_schema,
    explicit_port,
    host_suffixes,
    stored_sections,
)
from retrieval.index.page_quality import quality_of
from retrieval.index.translations import translation_group
from retrieval.index.vocabulary import VocabularyCounter
from retrieval.text.stopword_search import CAPTIONS_FIELD
from retrieval.text.tokenizer import analyze, analyzed_text, stems, words


class LexicalShardWriter:
    """Builds a fresh shard directory. Use as a context manager; commit happens on exit."""

    def __init__(
        self,
        path: Path,
        *,
        heap_bytes: int = 128_000_000,
        threads: int = 1,
        vocabulary: VocabularyCounter | None = None,
        existing: bool = False,
    ) -> None:
        self.path = Path(path)
        self.vocabulary = vocabulary
        """Where the surface words of each added document are counted (the build's speller vocabulary)."""
        if existing:
            # In-place updates of a built shard (retrieval.index.incremental): delete, add, commit.
            self._index = tantivy.Index.open(str(self.path))
        else:
            if self.path.exists():
                shutil.rmtree(self.path)
            self.path.mkdir(parents=True)
            self._index = tantivy.Index(build_schema(), path=str(self.path))
        self._writer = self._index.writer(heap_size=heap_bytes, num_threads=threads)
        self.count = 0
        self.ballast = 0
        self._nonempty: dict[str, int] = dict.fromkeys(LENGTH_FIELDS, 0)
        self.field_tokens: dict[str, int] = dict.fromkeys(LENGTH_FIELDS, 0)
        self.forward = ForwardWriter(forward_dir(self.path))
        """Token ids of what the text features read, per document (:mod:`retrieval.index.forward`)."""
        self._changed_in_place: set[int] = set()
        """Documents replaced or deleted by in-place updates: stale in the shard's forward index."""

    def _document(self, doc: Document) -> tuple[tantivy.Document, str, float]:
        """The Tantivy document of ``doc``, its normalised body and its quality; counts its field lengths."""
        # Whitespace is normalised once here so snippets need not do it per query.
        body = " ".join(doc.body[:MAX_BODY_CHARS].split())
        headings = " \n".join(doc.headings)[:MAX_HEADINGS_CHARS]
        anchors = " \n".join(doc.anchors)[:MAX_HEADINGS_CHARS]
        tdoc = tantivy.Document()
        tdoc.add_unsigned("doc_id", int(doc.doc_id))
        tdoc.add_text("url", doc.url)
        if doc.external_id:
            tdoc.add_text("external_id", doc.external_id)
        for suffix in host_suffixes(doc.host):
            tdoc.add_text("site", suffix)
        if port := explicit_port(doc.url):
            tdoc.add_text("site", f"{doc.host.lower().removeprefix('www.')}:{port}")
        if doc.lang:
            tdoc.add_text("lang", doc.lang.lower().split("-", 1)[0])
        if doc.filetype:
            tdoc.add_text("filetype", doc.filetype.lower())
        body_words = words(doc.title + " \n" + body)
        body_tokens = " ".join(stems(body_words))
        if self.vocabulary is not None:
            self.vocabulary.add_document([*body_words, *words(headings), *words(anchors)])
        analysed = {
            "title": analyzed_text(doc.title),
            "headings": analyzed_text(headings),
            "body": body_tokens,
            "anchors": analyzed_text(anchors),
            CAPTIONS_FIELD: " ".join(analyze(doc.title + " \n" + headings, keep_stopwords=True)),
        }
        for name, tokens in analysed.items():
            tdoc.add_text(name, tokens)
            self._nonempty[name] += bool(tokens)
            self.field_tokens[name] += tokens.count(" ") + 1 if tokens else 0
        quality = quality_of(doc)
        tdoc.add_float("pagerank", float(doc.pagerank))
        tdoc.add_float("published_at", float(doc.published_at or 0.0))
        tdoc.add_unsigned("body_words", body_tokens.count(" ") + 1 if body_tokens else 0)
        payload = {
            "url": doc.url,
            "title": doc.title,
            "body": body,
            "headings": list(doc.headings),
            "description": doc.description,
            "external_id": doc.external_id,
            "host": doc.host,
            "lang": doc.lang,
            "filetype": doc.filetype,
            "anchors": list(doc.anchors[:50]),
            "pagerank": float(doc.pagerank),
            "published_at": doc.published_at,
            "fetched_at": doc.fetched_at,
            "dup_cluster_size": int(doc.dup_cluster_size),
            "simhash": int(doc.simhash),
        }
        if group := translation_group(doc.url, doc.lang, doc.alternates):
            payload["translation_group"] = group
        if quality.link_density or quality.reasons:
            payload["quality"] = {
                "score": quality.score,
                "link_density": quality.link_density,
                "reasons": list(quality.reasons),
            }
        if sections := stored_sections(doc.sections, doc.body, body):
            payload["sections"] = sections
        tdoc.add_bytes("payload", json.dumps(payload, ensure_ascii=False).encode("utf-8"))
        return tdoc, body, quality.score

    def add(self, doc: Document) -> None:
        tdoc, body, quality = self._document(doc)
        self._writer.add_document(tdoc)
        self.forward.add(
            int(doc.doc_id),
            url=doc.url,
            title=doc.title,
            headings=doc.headings,
            body=body,
            anchors=doc.anchors,
            lang=doc.lang,
            pagerank=float(doc.pagerank),
            published_at=doc.published_at,
            fetched_at=doc.fetched_at,
            dup_cluster_size=int(doc.dup_cluster_size),
            quality=quality,
        )
        self.count += 1

    def add_ballast(self, docs: int, tokens: Mapping[str, int]) -> None:
        """Documents that only carry length, so this shard's statistics match the collection's.

        They hold one token no text can produce, have no ``doc_id`` of a real document
        and are excluded from every listing (see :mod:`retrieval.index.collection_stats`).
        """
        for i in range(docs):
            tdoc = tantivy.Document()
            tdoc.add_unsigned("doc_id", 0)
            tdoc.add_text("kind", "ballast")
            for name in LENGTH_FIELDS:
                share = tokens.get(name, 0) // docs + (1 if i < tokens.get(name, 0) % docs else 0)
                tdoc.add_text(name, " ".join([BALLAST_TOKEN] * share))
            self._writer.add_document(tdoc)
        self.ballast += docs

    def replace(self, doc: Document) -> dict[str, int]:
        """Index ``doc`` in place of any earlier version; returns its tokens per text field."""
        before = dict(self.field_tokens)
        tdoc, _, _ = self._document(doc)  # its quality counts from the next build (stale in forward)
        self.delete(int(doc.doc_id))
        self._writer.add_document(tdoc)
        return {name: self.field_tokens[name] - before[name] for name in LENGTH_FIELDS}

    def delete(self, doc_id: int) -> None:
        # By query, not by term: a term built from a Python int is signed and misses the u64 field.
        self._writer.delete_documents_by_query(
            tantivy.Query.term_query(self._index.schema, "doc_id", int(doc_id))
        )
        self._changed_in_place.add(int(doc_id))

    def drop_ballast(self) -> None:
        """Delete every ballast document (a new plan is added after updates)."""
        self._writer.delete_documents_by_query(
            tantivy.Query.term_query(self._index.schema, "kind", "ballast")
        )

    def commit_update(self, *, docs: int, nonempty_fields: Mapping[str, int]) -> None:
        """Commit in-place updates; the shard manifest gets the new real-document counts.

        The forward index is not rewritten per batch (that would cost the whole shard):
        the documents changed here are marked stale in it first, so a query whose
        candidates include one computes its text features from the stored documents,
        which give the same values (``rerank.features.compute_features``).
        """
        stale = forward_stale(forward_dir(self.path)).relative_to(self.path).as_posix()
        previous = self._recorded()
        mark_stale(forward_dir(self.path), self._changed_in_place)
        self._record_stale(stale)
        self._writer.commit()
        self._writer.wait_merging_threads()
        manifest = {
            "format": "trawl-lexical",
            "format_version": FORMAT_VERSION,
            "docs": docs,
            "ballast_docs": self.ballast,
            "nonempty_fields": dict(nonempty_fields),
            "updated_in_place": True,
        }
        if previous is not None:  # a shard written before checksums stays without them
            # Segment files never change once written: only new ones and the stale set are read.
            try:
                known = from_json(previous["files"])
            except ManifestError:
                known = {}  # an unreadable record: everything is read again
            manifest["files"] = lexical_record(self.path, known, rewritten={stale})
        # Replaced, not rewritten where it stands: serving processes open this shard while
        # it is updated, and a kill mid-write must leave the previous manifest.
        write_text(lexical_manifest(self.path), json.dumps(manifest))

    def _recorded(self) -> dict[str, Any] | None:
        """The checksum record of the shard as it is before this commit (None: it has none)."""
        try:
            raw = json.loads(lexical_manifest(self.path).read_text())
        except (OSError, ValueError):
            return None
        return raw if isinstance(raw, dict) and "files" in raw else None

    def _record_stale(self, stale: str) -> None:
        """Record the stale set just rewritten at once: a reader checking the shard before
        the commit ends would otherwise find it differing from its record."""
        manifest = self._recorded()
        if manifest is None or not (self.path / stale).exists():
            return
        if not isinstance(manifest["files"], dict):
            return
        manifest["files"][stale] = record(self.path, [stale])[stale].to_json()
        write_text(lexical_manifest(self.path), json.dumps(manifest))

    def add_all(self, docs: Iterable[Document]) -> int:
        for doc in docs:
            self.add(doc)
        return self.count

    def commit(self) -> None:
        self._writer.commit()
        self._writer.wait_merging_threads()
        self.forward.write()
        manifest = {
            "format": "trawl-lexical",
            "format_version": FORMAT_VERSION,
            "docs": self.count,
            "ballast_docs": self.ballast,
            "nonempty_fields": self._nonempty,
            "files": lexical_record(self.path),
        }
        lexical_manifest(self.path).write_text(json.dumps(manifest))

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self._writer.rollback()


def build_lexical_shard(docs: Iterable[Document], path: Path) -> int:
    """Index ``docs`` into a new shard at ``path``; returns how many were indexed."""
    with LexicalShardWriter(path) as writer:
        writer.add_all(docs)
    return writer.count


def write_forward_index(path: Path) -> int:
    """Write the forward index of an existing shard from its stored documents; returns documents.

    Indexes built before the forward index existed get it without a rebuild: the stored
    payload holds everything the build would have used.
    """
    shard = LexicalShard(path)
    writer = ForwardWriter(forward_dir(shard.path))
    for doc in shard.iter_stored():
        writer.add(
            int(doc.doc_id),
            url=doc.url,
            title=doc.title,
            headings=doc.headings,
            body=doc.body,
            anchors=doc.anchors,
            lang=doc.lang,
            pagerank=doc.pagerank,
            published_at=doc.published_at,
            fetched_at=doc.fetched_at,
            dup_cluster_size=doc.dup_cluster_size,
        )
    writer.write()
    manifest = json.loads(lexical_manifest(shard.path).read_text())
    if "files" in manifest:  # the forward files are new: recorded again, the segments' entries kept
        forward = forward_dir(shard.path).name + "/"
        rewritten = {n for n in lexical_files(shard.path) if n.startswith(forward)}
        manifest["files"] = lexical_record(shard.path, from_json(manifest["files"]), rewritten=rewritten)
        write_text(lexical_manifest(shard.path), json.dumps(manifest))
    return writer.count
