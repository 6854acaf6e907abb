"""Incremental indexing: the serving generation follows the docstore, updated in place.

Design (DECISIONS 26): Tantivy's own segment model, no delta index. Every step reads the
docstore and removal-log segments the generation does not hold yet and, in each shard,
deletes the changed and removed documents by their ``doc_id`` term and adds the new
versions in the same commit; serving processes reopen the shards when the update stamp
changes. The ballast of every shard is replanned from the new field lengths
(``retrieval.index.lengths``), so BM25 stays comparable across shards. When the generation
has vectors, the same step embeds the new passages and updates each shard's HNSW index
(``retrieval.vectors.incremental``), so hybrid search sees a change within the same lag.

Exactly once: the applied-segment cursor is written after every shard committed; a crash
replays the step, and delete-by-term plus add is idempotent. Compaction builds a new
generation from the whole docstore, records the segments it saw *before* reading as its
cursor, and publishes it; the next step replays anything newer, so the two paths converge.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from core.atomic import write_text
from core.crawldir import CrawlDir
from core.deletions import DeletionLog, Removal, is_removed
from core.docstore import MANIFEST, DocStore
from core.errors import DirectoryBusy, IndexDamaged, IndexStateError
from core.linkgraph import LinkGraphStore, anchors_by_target
from core.rowsegments import SEGMENT_SUFFIX
from core.settings import EmbedSettings
from core.types import DocId, Document
from retrieval.index import freshness_metrics, layout
from retrieval.index.build import shard_of
from retrieval.index.checksums import ContentMemo
from retrieval.index.collection_stats import plan_ballast
from retrieval.index.docs_source import (
    MAX_ANCHORS_PER_DOC,
    crawled_documents,
    page_ranks,
    title_suffixes_by_host,
)
from retrieval.index.freshness import FreshnessLog
from retrieval.index.integrity import check_generation, describe
from retrieval.index.lengths import ShardLengths
from retrieval.index.lexical import LexicalShard
from retrieval.index.lexical_writer import LexicalShardWriter
from retrieval.index.manifest import IndexManifest
from retrieval.index.retention import collect
from retrieval.index.root import IndexRoot
from retrieval.text.titles import without_suffix
from retrieval.vectors.backfill import backfill_index
from retrieval.vectors.embed import Embedder
from retrieval.vectors.incremental import update_shard_vectors, vector_model

logger = logging.getLogger(__name__)

__all__ = ["Cursor", "IncrementalIndexer", "StepReport"]

_NUMBER = re.compile(r"(\d+)" + SEGMENT_SUFFIX)


def _position(segment: str) -> tuple[str, int]:
    """``w-a/seg-000012.parquet`` → (``w-a``, 12); the root's folder is ``""``."""
    folder, _, name = segment.rpartition("/")
    match = _NUMBER.search(name)
    return folder, int(match.group(1)) if match else 0


@dataclass(slots=True)
class Cursor:
    """Per folder of the docstore and of the removal log, the highest segment applied."""

    docs: dict[str, int] = field(default_factory=dict)
    removals: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def marks(segments: Iterable[str]) -> dict[str, int]:
        marks: dict[str, int] = {}
        for segment in segments:
            folder, number = _position(segment)
            marks[folder] = max(marks.get(folder, 0), number)
        return marks

    @staticmethod
    def pending(segments: Iterable[str], marks: dict[str, int]) -> list[str]:
        out = []
        for segment in segments:
            folder, number = _position(segment)
            if number > marks.get(folder, 0):
                out.append(segment)
        return out

    def advanced(self, docs: Iterable[str], removals: Iterable[str]) -> Cursor:
        merged = Cursor(dict(self.docs), dict(self.removals))
        for folder, number in Cursor.marks(docs).items():
            merged.docs[folder] = max(merged.docs.get(folder, 0), number)
        for folder, number in Cursor.marks(removals).items():
            merged.removals[folder] = max(merged.removals.get(folder, 0), number)
        return merged

    def write(self, gen_dir: Path) -> None:
        write_text(layout.incremental_cursor(gen_dir), json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, gen_dir: Path) -> Cursor | None:
        path = layout.incremental_cursor(gen_dir)
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        return cls(dict(raw.get("docs", {})), dict(raw.get("removals", {})))


@dataclass(frozen=True, slots=True)
class StepReport:
    generation: str
    indexed: int
    removed: int
    backlog: int
    """Docstore rows written but not yet applied when the step began."""
    seconds: float


class IncrementalIndexer:
    """Applies a crawl directory's new segments to an index root's serving generation."""

    def __init__(
        self,
        data_dir: Path,
        index_root: Path,
        *,
        shards: int = 1,
        embed: EmbedSettings | None = None,
        embedder: Embedder | None = None,
        keep_generations: int | None = None,
    ) -> None:
        """``embedder``: encodes new passages when the generation has vectors (loaded from
        ``embed`` settings on first need otherwise, with the variant the vectors were made by).
        ``keep_generations``: after each compaction, remove all generations but the serving
        one, this many before it and those a serving process has open (None: keep all)."""
        self.keep_generations = keep_generations
        self._verified = ContentMemo()
        """Files of the serving generation found intact: a step reads only what changed since."""
        self.crawl = CrawlDir(data_dir)
        self.embed = embed
        self._embedder = embedder
        self.root = IndexRoot(index_root)
        self.shards = shards
        self.docstore = DocStore(self.crawl.docs)
        self.deletions = DeletionLog(self.crawl.deletions)
        self.freshness = FreshnessLog(self.root.root)
        self._removed: dict[DocId, Removal] | None = None
        self._anchors: tuple[int, dict[str, list[str]]] | None = None
        self.last_compaction = self._built_at()
        """When the serving generation was built (compaction builds and publishes one): a
        restarted ``trawl run`` compacts ``compact_every_s`` after that, not at once (every
        start rebuilt the whole index, and a crash loop rebuilt it without end)."""

    def _built_at(self) -> float:
        current = self.root.current()
        if current is None:
            return 0.0
        try:
            return IndexManifest.load(self.root.path_of(current)).built_at
        except (IndexStateError, OSError, ValueError, KeyError):
            return 0.0  # unreadable: the next compaction is due

    def embedder_for(self, model_id: str) -> Embedder | None:
        """An embedder of ``model_id`` (None when the one that can run here is another)."""
        if self._embedder is None:
            self._embedder = Embedder.from_settings(self.embed or EmbedSettings(), for_model_id=model_id)
        return self._embedder if self._embedder.model_id == model_id else None

    # -- state --------------------------------------------------------------------

    def generation(self) -> tuple[str, Path, Cursor] | None:
        """The serving generation with its cursor; None when it cannot be updated in place."""
        current = self.root.current()
        if current is None:
            return None
        path = self.root.path_of(current)
        cursor = Cursor.load(path)
        if cursor is None or not layout.shard_lengths(path, 0).exists():
            return None
        return current, path, cursor

    def backlog(self) -> int:
        """Documents written by the crawl that the serving generation does not hold yet."""
        state = self.generation()
        marks = state[2].docs if state else {}
        counts = {e: rows for e, rows in _segment_rows(self.docstore)}
        return sum(counts[s] for s in Cursor.pending(counts, marks))

    # -- compaction ---------------------------------------------------------------

    def compact(self) -> str:
        """Build a new base generation from the whole docstore and publish it; returns its id.

        Holds the index root's writer lock throughout (``DirectoryBusy`` when another
        writer has it), then collects old generations when ``keep_generations`` is set."""
        with self.root.writing():
            generation = self._compact()
            if self.keep_generations is not None:
                collect(self.root, self.keep_generations)
        return generation

    def _compact(self) -> str:
        started = time.perf_counter()
        seen = Cursor(Cursor.marks(self.docstore.segments()), Cursor.marks(self.deletions.segments()))
        docs = crawled_documents(self.crawl.root) if self.crawl.docs.exists() else iter(())
        current = self.root.current()
        model = vector_model(self.root.path_of(current)) if current else None
        generation = self.root.build(docs, shards=self.shards, source=f"crawl:{self.crawl.root}")
        path = self.root.path_of(generation)
        if model is not None and (embedder := self.embedder_for(model)) is not None:
            backfill_index(path, embedder, self.embed or EmbedSettings())  # links stored vectors
        seen.write(path)
        self.root.publish(generation)
        self._removed = None
        self.last_compaction = time.time()
        logger.info("compacted into generation %s in %.1f s", generation, time.perf_counter() - started)
        return generation

    # -- one step -----------------------------------------------------------------

    def _removals(self) -> dict[DocId, Removal]:
        if self._removed is None:
            self._removed = self.deletions.latest()
        return self._removed

    def _enrich(self, docs: list[Document]) -> list[Document]:
        """What ``crawled_documents`` adds: title without site suffix, inbound anchors, PageRank."""
        if not docs:
            return docs
        suffixes = title_suffixes_by_host(self.docstore)
        links = LinkGraphStore(self.crawl.links) if self.crawl.links.exists() else None
        edge_segments = len(links.files()) if links else 0
        if self._anchors is None or self._anchors[0] != edge_segments:
            anchors = anchors_by_target(links.read_edges()) if links else {}
            self._anchors = (edge_segments, anchors)
        anchors = self._anchors[1]
        ranks = page_ranks(self.crawl.root)
        out = []
        for doc in docs:
            updates: dict[str, object] = {}
            suffix = suffixes.get(doc.host, "")
            if suffix and doc.title.endswith(suffix):
                updates["title"] = without_suffix(doc.title, suffix)
            if inbound := anchors.get(doc.url):
                updates["anchors"] = tuple(inbound[:MAX_ANCHORS_PER_DOC])
            if doc.url in ranks:
                updates["pagerank"] = ranks[doc.url]
            out.append(dataclasses.replace(doc, **updates) if updates else doc)  # type: ignore[arg-type]
        return out

    def step(self) -> StepReport | None:
        """Apply every pending segment to the serving generation; None when nothing was pending.

        Raises ``LookupError`` when the serving generation cannot be updated in place
        (none yet, or built without lengths): compact first; ``DirectoryBusy`` when another
        writer holds the index root (the step is due again once it is done).
        """
        with self.root.writing():
            return self._step()

    def _step(self) -> StepReport | None:
        state = self.generation()
        if state is None:
            raise LookupError("no generation that can be updated in place; compact first")
        generation, path, cursor = state
        started = time.perf_counter()
        doc_segments = Cursor.pending(self.docstore.segments(), cursor.docs)
        removal_segments = Cursor.pending(self.deletions.segments(), cursor.removals)
        if not doc_segments and not removal_segments:
            freshness_metrics.BACKLOG.set(0)
            return None
        # A merge would fold a garbled segment into a new one, recorded afresh: never build on damage.
        if damage := check_generation(path, content=True, memo=self._verified):
            message = f"Generation {generation} is damaged, not updated in place: {describe(damage)}"
            raise IndexDamaged(message, tuple(damage))
        removed = self._removals()
        latest: dict[DocId, Document] = {}
        rows = 0
        for segment in doc_segments:
            for doc in self.docstore.iter_documents(segment):
                rows += 1
                held = latest.get(doc.doc_id)
                if held is None or (doc.fetched_at or 0.0) >= (held.fetched_at or 0.0):
                    latest[doc.doc_id] = doc
        new_removals: dict[DocId, Removal] = {}
        for segment in removal_segments:
            for removal in self.deletions.removals_in(segment):
                new_removals[removal.doc_id] = removal
                held_removal = removed.get(removal.doc_id)
                if held_removal is None or removal.at >= held_removal.at:
                    removed[removal.doc_id] = removal
        freshness_metrics.BACKLOG.set(rows)
        # The shards may already hold a newer version than this batch's (another worker
        # fetched the page again and its batch was applied first): that version stays, as
        # in a rebuild, where the latest fetch wins (core.docstore). Likewise a removal of
        # a document this batch does not hold takes out the held version only if it hides
        # that version (one flushed late leaves a page fetched after it).
        others = [i for i in new_removals if i not in latest]
        held_at = _indexed_fetch_times(path, [*latest, *others])
        stale = {i for i, d in latest.items() if held_at.get(i, -1.0) > (d.fetched_at or 0.0)}
        current = [d for i, d in latest.items() if i not in stale]
        to_index = [d for d in current if not is_removed(d, removed.get(d.doc_id))]
        to_delete = {d.doc_id for d in current if is_removed(d, removed.get(d.doc_id))}
        to_delete.update(
            i for i in (*others, *stale) if i in removed and (i not in held_at or held_at[i] <= removed[i].at)
        )
        applied = self._apply(path, self._enrich(to_index), to_delete)
        now = time.time()
        write_text(layout.update_stamp(path), f"{time.time_ns()}\n")
        self.freshness.record(
            generation,
            indexed=((d.url, d.content_hash, d.fetched_at) for d in to_index),
            removed=(
                (r.url, r.reason, r.at) for i, r in new_removals.items() if i in to_delete and i in applied
            ),
            indexed_at=now,
            published_at=now,
        )
        cursor.advanced(doc_segments, removal_segments).write(path)
        for doc in to_index:
            if doc.fetched_at:
                freshness_metrics.LAG.observe(max(0.0, now - doc.fetched_at))
        freshness_metrics.DELETIONS.inc(len(applied))
        report = StepReport(generation, len(to_index), len(to_delete), rows, time.perf_counter() - started)
        logger.info(
            "generation %s: %d indexed, %d removed in %.2f s", generation, report.indexed, report.removed,
            report.seconds,
        )  # fmt: skip
        return report

    def _apply(self, path: Path, docs: list[Document], deletes: set[DocId]) -> set[DocId]:
        """Replace and delete documents in every shard, then replan the ballast; returns deletes."""
        shards = IndexManifest.load(path).shards
        writers = [LexicalShardWriter(layout.lexical_dir(path, i), existing=True) for i in range(shards)]
        tables = [ShardLengths(layout.shard_lengths(path, i)) for i in range(shards)]
        try:
            puts: list[list[tuple[int, dict[str, int]]]] = [[] for _ in range(shards)]
            dels: list[list[int]] = [[] for _ in range(shards)]
            for doc_id in deletes:
                shard = shard_of(int(doc_id), shards)
                writers[shard].delete(int(doc_id))
                dels[shard].append(int(doc_id))
            for doc in docs:
                shard = shard_of(int(doc.doc_id), shards)
                puts[shard].append((int(doc.doc_id), writers[shard].replace(doc)))
            for table, put, delete in zip(tables, puts, dels, strict=True):
                table.apply(put, delete)
            totals = [t.totals() for t in tables]
            plan = plan_ballast([t.docs for t in totals], [t.field_tokens for t in totals])
            for writer, total, n_ballast, tokens in zip(
                writers, totals, plan.ballast_docs, plan.ballast_tokens, strict=True
            ):
                writer.drop_ballast()
                if n_ballast:
                    writer.add_ballast(n_ballast, tokens)
                writer.commit_update(docs=total.docs, nonempty_fields=total.nonempty_fields)
        finally:
            for table in tables:
                table.close()
        by_shard: list[list[Document]] = [[] for _ in range(shards)]
        for doc in docs:
            by_shard[shard_of(int(doc.doc_id), shards)].append(doc)
        for shard in range(shards):
            update_shard_vectors(path, shard, by_shard[shard], map(DocId, dels[shard]), self.embedder_for)
        return deletes


def _indexed_fetch_times(path: Path, doc_ids: Collection[DocId]) -> dict[DocId, float]:
    """When the version each shard of ``path`` holds of ``doc_ids`` was fetched (absent: none held).

    Read from the stored payloads, the only record of which version an earlier step
    applied; unknown fetch times count as 0, as ``core.deletions.is_removed`` counts them.
    """
    if not doc_ids:
        return {}
    shards = IndexManifest.load(path).shards
    wanted: list[list[DocId]] = [[] for _ in range(shards)]
    for doc_id in doc_ids:
        wanted[shard_of(int(doc_id), shards)].append(doc_id)
    found: dict[DocId, float] = {}
    for shard, ids in enumerate(wanted):
        if ids:
            stored = LexicalShard(layout.lexical_dir(path, shard)).stored_many(ids)
            found.update({doc_id: float(doc.fetched_at or 0.0) for doc_id, doc in stored.items()})
    return found


def _segment_rows(store: DocStore) -> list[tuple[str, int]]:
    """(segment, rows) in append order, from the manifests (no Parquet read)."""
    out: list[tuple[str, int]] = []
    manifests = [("", store.root / MANIFEST)]
    if store.root.is_dir():
        manifests += [
            (child.name, child / MANIFEST) for child in sorted(store.root.iterdir()) if child.is_dir()
        ]
    for folder, manifest in manifests:
        if manifest.exists():
            for entry in json.loads(manifest.read_text())["segments"]:
                name = f"{folder}/{entry['name']}" if folder else entry["name"]
                out.append((name, int(entry["rows"])))
    return out


def follow(
    indexer: IncrementalIndexer,
    stop: threading.Event,
    *,
    poll_s: float = 1.0,
    compact_every_s: float = 3600.0,
    on_step: Callable[[StepReport], None] | None = None,
) -> None:
    """Apply the crawl's segments every ``poll_s`` until ``stop``; compact every ``compact_every_s``.

    The bound on crawl-to-searchable lag is the crawl's flush interval plus ``poll_s``
    plus one step. A generation that cannot be updated in place is compacted first. While
    another writer holds the index root (a manual build or publish), it waits and says so.
    """
    busy = ""
    while not stop.is_set():
        try:
            report = _follow_once(indexer, compact_every_s)
        except DirectoryBusy as exc:
            if str(exc) != busy:
                logger.warning("index steps wait: %s", exc)
            busy = str(exc)
        except IndexDamaged as exc:  # the docstore holds every document: a new generation from it
            logger.error("%s; compacting into a new generation", exc)
            indexer.compact()
        else:
            busy = ""
            if report is not None and on_step is not None:
                on_step(report)
        stop.wait(poll_s)


def _follow_once(indexer: IncrementalIndexer, compact_every_s: float) -> StepReport | None:
    with indexer.root.writing():
        if indexer.generation() is None:
            indexer.compact()
        elif compact_every_s > 0 and time.time() - indexer.last_compaction >= compact_every_s:
            indexer.step()
            indexer.compact()
        return indexer.step()
