"""Index build: documents in, an index directory out.

The directory (one generation; layout in :mod:`retrieval.index.layout`) holds one Tantivy
index per shard and the :class:`retrieval.index.manifest.IndexManifest`. It is built beside
its final place and renamed in (:func:`core.atomic.staging_dir`), so a reader never sees
a half-built index and a crash mid-build leaves the previous one intact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from core.atomic import staging_dir
from core.diskspace import raising_disk_full
from core.types import Document
from retrieval.index.collection_stats import plan_ballast
from retrieval.index.layout import lexical_dir, shard_lengths, vocabulary_file
from retrieval.index.lengths import ShardLengths
from retrieval.index.lexical_writer import LexicalShardWriter
from retrieval.index.manifest import IndexManifest
from retrieval.index.vocabulary import VocabularyCounter
from retrieval.text.tokenizer import ANALYSIS_VERSION

_AGAIN = "free space and run the same command again"


def shard_of(doc_id: int, shards: int) -> int:
    """Document partition: the doc id is already a hash of the canonical URL."""
    return doc_id % shards


def build_index(
    docs: Iterable[Document],
    out: Path,
    *,
    shards: int = 1,
    source: str = "",
    on_progress: Callable[[int], None] | None = None,
    extra: dict[str, Any] | None = None,
) -> IndexManifest:
    """Build an index of ``docs`` into ``out`` (replaced atomically when complete).

    A write that fails for lack of space raises ``DiskFull`` naming ``out``'s folder (Tantivy
    may only say its writer was killed: the free space is looked at before the staging
    folder is removed)."""
    with staging_dir(Path(out)) as tmp, raising_disk_full(Path(out).parent, advice=_AGAIN):
        vocabulary = VocabularyCounter()
        writers = [LexicalShardWriter(lexical_dir(tmp, i), vocabulary=vocabulary) for i in range(shards)]
        lengths: list[list[tuple[int, dict[str, int]]]] = [[] for _ in range(shards)]
        count = 0
        for doc in docs:
            shard = shard_of(int(doc.doc_id), shards)
            before = dict(writers[shard].field_tokens)
            writers[shard].add(doc)
            after = writers[shard].field_tokens
            lengths[shard].append((int(doc.doc_id), {f: after[f] - before[f] for f in after}))
            count += 1
            if on_progress is not None and count % 500 == 0:
                on_progress(count)
        plan = plan_ballast([w.count for w in writers], [w.field_tokens for w in writers])
        for writer, n_ballast, tokens in zip(writers, plan.ballast_docs, plan.ballast_tokens, strict=True):
            if n_ballast:
                writer.add_ballast(n_ballast, tokens)
            writer.commit()
        for i, rows in enumerate(lengths):
            # Kept so the shard can be updated in place later (retrieval.index.incremental).
            table = ShardLengths(shard_lengths(tmp, i))
            table.apply(rows)
            table.close()
        vocabulary.write(vocabulary_file(tmp))
        extra = {"analysis": ANALYSIS_VERSION, **(extra or {})}
        IndexManifest.write(tmp, shards=shards, docs=count, source=source, extra=extra)
    return IndexManifest.load(out)
