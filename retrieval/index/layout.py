"""The layout of an index root: the one module that names every path in it.

Why one module: builds, backfills, serving and shard processes, evaluation and benchmarks
all name these paths, so a rename is made here once. Nothing here creates or reads a file. ::

    ROOT/CURRENT              id of the serving generation (retrieval.index.manifest)
    ROOT/history.jsonl        every publish, for rollback
    ROOT/lock, ROOT/pins/     the writers' lock (core.dirlock); readers' pins (retrieval.index.pins)
    ROOT/backfill.json        progress of the running embeddings backfill
    ROOT/freshness.sqlite     per URL: fetch, index and publish times (retrieval.index.freshness)
    ROOT/vectors/<version>/   vectors by passage hash, for all generations (:func:`vector_store_dir`)
    ROOT/generations/<gen>/   one complete generation (:func:`generation_dir`)

A generation directory is itself an index (what ``build_index`` writes), so its helpers take
the generation's path; a bare index directory is its own vector-store root (:func:`store_root`).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = [
    "CHECKPOINT",
    "CURRENT",
    "MANIFEST",
    "backfill_lock",
    "backfill_progress_file",
    "checkpoint_file",
    "chunk_file",
    "chunk_name",
    "chunk_of",
    "chunk_number",
    "chunks_dir",
    "current_pointer",
    "generation_dir",
    "forward_array",
    "forward_dir",
    "forward_manifest",
    "forward_terms",
    "generations_dir",
    "freshness_file",
    "history_file",
    "incremental_cursor",
    "hnsw_file",
    "is_index",
    "labels_file",
    "lock_file",
    "lexical_dir",
    "lexical_manifest",
    "manifest_file",
    "passages_file",
    "pin_file",
    "segment_file",
    "segment_name",
    "segment_number",
    "shard_dir",
    "shard_lengths",
    "store_lock",
    "store_root",
    "update_stamp",
    "vector_index_dir",
    "vector_pointer",
    "vector_root",
    "vector_store_dir",
    "vector_stores_dir",
    "version_dir",
    "version_name",
    "vocabulary_file",
]

CURRENT = "CURRENT"
"""Pointer file naming what serves: a generation under the root, a version under ``vector/``."""
MANIFEST = "manifest.json"
"""Manifest of a generation and of a saved vector index."""
CHECKPOINT = "checkpoint.json"
"""The backfill's commit point: the chunks it names are complete."""


# -- the root --------------------------------------------------------------------------


def current_pointer(root: Path) -> Path:
    return Path(root) / CURRENT


def history_file(root: Path) -> Path:
    return Path(root) / "history.jsonl"


def lock_file(root: Path) -> Path:
    """Held by whoever writes the root: build, publish, rollback, gc, an in-place step."""
    return Path(root) / "lock"


def pin_file(root: Path, generation: str) -> Path:
    """Locked shared by every process that has ``generation`` open; gc leaves a locked one."""
    return Path(root) / "pins" / generation


def generations_dir(root: Path) -> Path:
    return Path(root) / "generations"


def generation_dir(root: Path, generation: str) -> Path:
    """One complete generation; hidden names under ``generations/`` are leftovers.

    Its layout, the same as that of a bare index directory::

        manifest.json                   IndexManifest: format, shard count, documents, models
        vocabulary.tsv                  surface words and document frequencies (retrieval.index.vocabulary)
        incremental.json                docstore segments applied in place (retrieval.index.incremental)
        updated                         changes on every in-place commit: serving processes reload
        shard-0000/lengths.sqlite       per document field lengths, for ballast under updates
        shard-0000/lexical/             Tantivy index (retrieval.index.lexical)
          trawl-lexical.json            its format, document and ballast counts
          trawl-forward/                forward index: token ids per field (retrieval.index.forward)
            forward.json                format, prefix limits, languages
            terms.txt                   the shard's term dictionary (line number = id)
            <name>.npy                  <field>.tokens/.offsets, doc_ids, term_hashes, statics
        shard-0000/vector/CURRENT       name of the vector version being served
        shard-0000/vector/<version>/
          lock                          flock: one backfill per shard and model
          passages.npy                  passage hashes its vectors use (GC roots)
          index/                        a saved VectorShard (retrieval.vectors.hnsw):
            manifest.json               format, model id, dim, counts, HNSW params
            hnsw.bin                    hnswlib index (vectors included)
            labels.npy                  row label -> doc id (-1: deleted)
    """
    return generations_dir(root) / generation


def backfill_progress_file(root: Path) -> Path:
    """Written by a running backfill, read by the service (``/healthz``, home page)."""
    return Path(root) / "backfill.json"


def cursor_key_file(root: Path) -> Path:
    """The secret that signs deep-paging cursors (retrieval.query.cursor), created on first start."""
    return Path(root) / "cursor.key"


def store_root(index_dir: Path) -> Path:
    """The root whose vector store serves ``index_dir``: its index root when it is a
    generation under one, else the directory itself."""
    index_dir = Path(index_dir)
    parent = index_dir.parent
    if parent.name == generations_dir(parent.parent).name:
        return parent.parent
    return index_dir


# -- the vector store --------------------------------------------------------------------


def vector_stores_dir(root: Path) -> Path:
    return Path(root) / "vectors"


def vector_store_dir(root: Path, model_id: str) -> Path:
    """Vectors of one model by passage hash, shared by every generation of the root.

    Its files::

        lock                            flock: one writer per model
        checkpoint.json                 committed segments
        segment-000001.<part>.npy       hashes (uint64) and vectors (float32)
    """
    return vector_stores_dir(root) / version_name(model_id)


def store_lock(store_path: Path) -> Path:
    return Path(store_path) / "lock"


def segment_name(number: int) -> str:
    return f"segment-{number:06d}"


def segment_number(name: str) -> int:
    """``segment-000012`` → 12."""
    return int(name.split("-")[1])


def segment_file(store_path: Path, name: str, part: str) -> Path:
    """One array of a segment; ``part`` is ``hashes`` or ``vectors``."""
    return Path(store_path) / f"{name}.{part}.npy"


# -- one generation (or a bare index directory) ------------------------------------------


def manifest_file(index_dir: Path) -> Path:
    return Path(index_dir) / MANIFEST


def is_index(path: Path) -> bool:
    """True when ``path`` is a complete generation (its manifest is written last)."""
    return manifest_file(path).exists()


def vocabulary_file(index_dir: Path) -> Path:
    """The generation's surface vocabulary: the speller's dictionary."""
    return Path(index_dir) / "vocabulary.tsv"


def shard_dir(index_dir: Path, shard: int) -> Path:
    return Path(index_dir) / f"shard-{shard:04d}"


def lexical_dir(index_dir: Path, shard: int) -> Path:
    return shard_dir(index_dir, shard) / "lexical"


def lexical_manifest(lexical_path: Path) -> Path:
    """The Trawl manifest inside a Tantivy directory (beside Tantivy's own ``meta.json``)."""
    return Path(lexical_path) / "trawl-lexical.json"


def forward_dir(lexical_path: Path) -> Path:
    """The forward index inside a shard's Tantivy directory (Tantivy ignores files it did not make)."""
    return Path(lexical_path) / "trawl-forward"


def forward_manifest(forward_path: Path) -> Path:
    return Path(forward_path) / "forward.json"


def forward_terms(forward_path: Path) -> Path:
    return Path(forward_path) / "terms.txt"


def forward_array(forward_path: Path, name: str) -> Path:
    return Path(forward_path) / f"{name}.npy"


def forward_stale(forward_path: Path) -> Path:
    """Documents replaced or deleted in place since the forward index was written."""
    return Path(forward_path) / "stale.npy"


# -- vectors of one shard ----------------------------------------------------------------


def version_name(model_id: str) -> str:
    """A directory name for a model id: ``all-MiniLM-L6-v2@f0a7…`` → ``all-minilm-l6-v2-f0a7…``."""
    return re.sub(r"[^a-z0-9]+", "-", model_id.lower()).strip("-")


def vector_root(index_dir: Path, shard: int) -> Path:
    return shard_dir(index_dir, shard) / "vector"


def vector_pointer(index_dir: Path, shard: int) -> Path:
    return vector_root(index_dir, shard) / CURRENT


def version_dir(index_dir: Path, shard: int, model_id: str) -> Path:
    """Everything the backfill keeps for one shard and embedding model."""
    return vector_root(index_dir, shard) / version_name(model_id)


def vector_index_dir(version_path: Path) -> Path:
    """The saved VectorShard of a version directory."""
    return Path(version_path) / "index"


def backfill_lock(version_path: Path) -> Path:
    return Path(version_path) / "lock"


def passages_file(version_path: Path) -> Path:
    """Passage hashes (uint64, one per vector row) the version's index was built from."""
    return Path(version_path) / "passages.npy"


def chunks_dir(version_path: Path) -> Path:
    return Path(version_path) / "chunks"


def checkpoint_file(chunks_path: Path) -> Path:
    return Path(chunks_path) / CHECKPOINT


def chunk_name(number: int) -> str:
    return f"chunk-{number:06d}"


def chunk_number(name: str) -> int:
    """``chunk-000012`` → 12."""
    return int(name.split("-")[1])


def chunk_file(chunks_path: Path, name: str, part: str) -> Path:
    """One array of a chunk; ``part`` is ``docs``, ``rows`` or ``vectors``."""
    return Path(chunks_path) / f"{name}.{part}.npy"


def chunk_of(file_name: str) -> str:
    """The chunk a file in the chunks directory belongs to (empty for temporaries)."""
    return file_name.split(".", 1)[0]


# -- a saved vector index ----------------------------------------------------------------


def hnsw_file(vector_index: Path) -> Path:
    return Path(vector_index) / "hnsw.bin"


def labels_file(vector_index: Path) -> Path:
    """The id map: hnswlib row label → document id."""
    return Path(vector_index) / "labels.npy"


# -- in-place (incremental) updates ------------------------------------------------------


def incremental_cursor(index_dir: Path) -> Path:
    """Which docstore and removal-log segments a generation already holds (applied in place)."""
    return Path(index_dir) / "incremental.json"


def update_stamp(index_dir: Path) -> Path:
    """Rewritten after every in-place commit; serving processes reopen the shards when it changes."""
    return Path(index_dir) / "updated"


def shard_lengths(index_dir: Path, shard: int) -> Path:
    """Per real document of a shard: its tokens per text field (the ballast plan's input)."""
    return shard_dir(index_dir, shard) / "lengths.sqlite"


def freshness_file(root: Path) -> Path:
    """Per URL of an index root: when it was fetched, indexed and published, or removed."""
    return Path(root) / "freshness.sqlite"
