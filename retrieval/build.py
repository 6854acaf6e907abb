"""Index build: documents in, an index directory out.

Layout of an index directory (one generation; issue 6 adds generations above it)::

    OUT/manifest.json        format, code version, shard count, documents, build time
    OUT/shard-0000/lexical/  Tantivy index (see retrieval.lexical)

The directory is built beside its final place and renamed in, so a reader never sees
a half-built index and a crash mid-build leaves the previous one intact.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ManifestError
from core.types import Document
from retrieval.lexical import LexicalShardWriter
from retrieval.stats import plan_ballast

INDEX_FORMAT = "trawl-index"
INDEX_FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class IndexManifest:
    shards: int
    docs: int
    built_at: float
    source: str
    generation: str
    """The generation id (the directory name when built outside an index root)."""
    raw: dict[str, Any]
    """The whole manifest, for fields later stages add (embedding model, LTR model, …)."""

    @classmethod
    def load(cls, root: Path) -> IndexManifest:
        path = Path(root) / "manifest.json"
        if not path.exists():
            raise ManifestError(
                f"{root} is not a Trawl index (no manifest.json); build one with "
                "`trawl index --beir DIR --index OUT` or `trawl index --data DIR --index OUT`."
            )
        try:
            raw = json.loads(path.read_text())
            if raw.get("format") != INDEX_FORMAT or raw.get("format_version") != INDEX_FORMAT_VERSION:
                raise ManifestError(f"{path} has an unknown format; rebuild the index.")
            return cls(
                shards=int(raw["shards"]),
                docs=int(raw["docs"]),
                built_at=float(raw["built_at"]),
                source=str(raw["source"]),
                generation=str(raw.get("generation") or Path(root).resolve().name),
                raw=raw,
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{path} is not a valid index manifest: {exc}") from exc


def shard_dir(root: Path, shard: int) -> Path:
    return Path(root) / f"shard-{shard:04d}"


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
    """Build an index of ``docs`` into ``out`` (replaced atomically when complete)."""
    out = Path(out)
    tmp = out.with_name(out.name + f".building-{int(time.time() * 1000)}")
    tmp.mkdir(parents=True)
    try:
        writers = [LexicalShardWriter(shard_dir(tmp, i) / "lexical") for i in range(shards)]
        count = 0
        for doc in docs:
            writers[shard_of(int(doc.doc_id), shards)].add(doc)
            count += 1
            if on_progress is not None and count % 500 == 0:
                on_progress(count)
        plan = plan_ballast([w.count for w in writers], [w.field_tokens for w in writers])
        for writer, n_ballast, tokens in zip(writers, plan.ballast_docs, plan.ballast_tokens, strict=True):
            if n_ballast:
                writer.add_ballast(n_ballast, tokens)
            writer.commit()
        raw = {
            "format": INDEX_FORMAT,
            "format_version": INDEX_FORMAT_VERSION,
            "shards": shards,
            "docs": count,
            "built_at": time.time(),
            "source": source,
            **(extra or {}),
        }
        (tmp / "manifest.json").write_text(json.dumps(raw, indent=2))
        manifest = IndexManifest.load(tmp)
        if out.exists():
            old = out.with_name(out.name + f".old-{int(time.time() * 1000)}")
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest
