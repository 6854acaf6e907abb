"""The manifest of one index generation, and the ids and pointer that name generations.

One generation ties together everything a query touches: the shard indexes, the
embedding model that made their vectors, the LTR model and the reranker (its
manifest, read as an :class:`IndexManifest`, names them). Paths are named in
:mod:`retrieval.index.layout`.

A generation directory appears by ``rename`` only once complete (it is staged under a
hidden name beside its place, and hidden names are leftovers swept by the next build),
and ``CURRENT`` is replaced atomically and durably (:func:`core.atomic.write_text`), so a
crash at any point leaves the previous generation serving.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.atomic import write_text
from core.errors import ManifestError
from retrieval.index import layout
from retrieval.index.checksums import record, to_json

INDEX_FORMAT = "trawl-index"
INDEX_FORMAT_VERSION = 1
GENERATION_FILES: tuple[str, ...] = (layout.vocabulary_file(Path()).name,)
"""The generation's own data files (beside its shards): their sizes and hashes are in the
manifest's ``checksums``; each shard part records its own (:mod:`retrieval.index.integrity`)."""


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

    @property
    def analysis(self) -> int:
        """The text analysis its terms were made with (``retrieval.text.tokenizer.ANALYSIS_VERSION``;
        indexes from before the field was written are version 1)."""
        return int(self.raw.get("analysis", 1))

    @classmethod
    def load(cls, root: Path) -> IndexManifest:
        path = layout.manifest_file(root)
        if not path.exists():
            raise ManifestError(
                f"{root} is not a Trawl index (no {path.name}); build one with "
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

    @classmethod
    def write(
        cls, root: Path, *, shards: int, docs: int, source: str, extra: dict[str, Any] | None = None
    ) -> IndexManifest:
        """Write the manifest of a finished index directory and read it back (validated).

        Its ``checksums`` record the generation's own files as they are now, unless ``extra``
        brings them (a generation derived from another keeps the record it was built with).
        """
        raw = {
            "format": INDEX_FORMAT,
            "format_version": INDEX_FORMAT_VERSION,
            "shards": shards,
            "docs": docs,
            "built_at": time.time(),
            "source": source,
            **(extra or {}),
        }
        if "checksums" not in raw:
            names = [n for n in GENERATION_FILES if (Path(root) / n).is_file()]
            raw["checksums"] = {"algorithm": "blake2b-256", "files": to_json(record(Path(root), names))}
        write_text(layout.manifest_file(root), json.dumps(raw, indent=2))
        return cls.load(root)


def new_generation_id() -> str:
    return time.strftime("g%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def read_pointer(path: Path) -> str | None:
    """The id a ``CURRENT`` file names, or None when it is missing or empty."""
    try:
        value = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return value or None


def is_generation_id(text: str) -> bool:
    """Whether ``text`` can name a generation directory (not a path, not hidden)."""
    return bool(text) and "/" not in text and not text.startswith(".")
