"""The forward index of a shard: each document's analysed token ids, per field, on disk.

A learned ranker needs text evidence for a few hundred candidates per query; analysing
their stored text per query costs more than the first stage, so the build analyses it
once and keeps, per field, the token ids of exactly the text the features read
(:func:`feature_texts`, the same text :mod:`rerank.features` reads from a stored
document), the static values features use, a term dictionary with a 64-bit hash per
term (so candidates of different shards compare, for PRF), and per document its PRF
term vector (format 2; a format 1 index still opens and counts them per query).

Files (names in :mod:`retrieval.index.layout`): ``<field>.tokens.npy`` (int32 ids) and
``<field>.offsets.npy`` (int64, n + 1) per field and for ``prf`` (plus ``prf.counts.npy``),
``doc_ids.npy``, one ``.npy`` per static column, ``terms.txt`` (line = id),
``term_hashes.npy`` and ``forward.json``. Arrays are memory-mapped at open; the features
read from them are :mod:`retrieval.index.forward_features`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
from numpy.typing import NDArray

from core.atomic import write_text, write_with
from retrieval.index.arrays import load_array
from retrieval.index.layout import forward_array, forward_manifest, forward_stale, forward_terms
from retrieval.text.tokenizer import analyze

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Format 1 lacks the PRF term vectors; they are then counted per query."""
FIELDS: tuple[str, ...] = ("title", "headings", "body", "anchors")
PRF = "prf"
"""The stored PRF term vectors, kept like a field (tokens + offsets) with a counts array."""
BODY_CHARS = 1000
"""The body prefix the text features read (BM25 saw all of it)."""
SIDE_CHARS = 600
"""…and the prefix of the joined headings and of the joined anchor texts."""
ANCHORS_KEPT = 50
"""Anchor texts a document keeps (the stored payload keeps as many)."""

_STATICS = ("doc_words", "url_depth", "pagerank", "when", "lang", "dup_cluster_size", "quality")
_OPTIONAL_STATICS = frozenset({"quality"})
"""Statics a forward index written before them lacks: read as absent (every page at quality 1)."""


def url_depth(url: str) -> int:
    """Path segments of a URL: ``https://a.org/`` is 0, ``https://a.org/x/y.html`` is 2.

    String operations rather than ``urlsplit``: this runs for every document.
    """
    rest = url.split("://", 1)[-1]
    slash = rest.find("/")
    if slash < 0:
        return 0
    path = rest[slash:].split("?", 1)[0].split("#", 1)[0].strip("/")
    return path.count("/") + 1 if path else 0


def term_hash(token: str) -> int:
    """Stable 64-bit id of a token, equal in every shard (a shard's own ids are local)."""
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")


def term_vector(tokens: NDArray[np.int32]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(distinct token ids in order of first occurrence, count of each): a PRF term vector."""
    ids, first, counts = np.unique(tokens, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    return ids[order].astype(np.int64), counts[order].astype(np.int64)


def feature_texts(
    title: str,
    headings: Sequence[str],
    body: str,
    anchors: Sequence[str],
    *,
    body_chars: int = BODY_CHARS,
    side_chars: int = SIDE_CHARS,
) -> dict[str, str]:
    """The text of each field that text features read (``body`` already whitespace-normalised)."""
    return {
        "title": title,
        "headings": " ".join(headings)[:side_chars],
        "body": body[:body_chars],
        "anchors": " ".join(anchors[:ANCHORS_KEPT])[:side_chars],
    }


class ForwardWriter:
    """Collects documents during a shard build; :meth:`write` puts the arrays in ``directory``."""

    def __init__(
        self, directory: Path, *, body_chars: int = BODY_CHARS, side_chars: int = SIDE_CHARS
    ) -> None:
        self.directory = Path(directory)
        self.body_chars = body_chars
        self.side_chars = side_chars
        self._terms: dict[str, int] = {}
        self._tokens: dict[str, list[NDArray[np.int32]]] = {f: [] for f in (*FIELDS, PRF)}
        self._prf_counts: list[NDArray[np.int32]] = []
        self._doc_ids: list[int] = []
        self._statics: dict[str, list[Any]] = {name: [] for name in _STATICS}
        self._langs: dict[str, int] = {}

    @property
    def count(self) -> int:
        return len(self._doc_ids)

    def _ids(self, text: str) -> NDArray[np.int32]:
        terms = self._terms
        return np.fromiter((terms.setdefault(t, len(terms)) for t in analyze(text)), dtype=np.int32, count=-1)

    def add(
        self,
        doc_id: int,
        *,
        url: str,
        title: str,
        headings: Sequence[str],
        body: str,
        anchors: Sequence[str],
        lang: str,
        pagerank: float,
        published_at: float | None,
        fetched_at: float | None,
        dup_cluster_size: int,
        quality: float = 1.0,
    ) -> None:
        texts = feature_texts(
            title, headings, body, anchors, body_chars=self.body_chars, side_chars=self.side_chars
        )
        for name in FIELDS:
            self._tokens[name].append(self._ids(texts[name]))
        terms, counts = term_vector(np.concatenate([self._tokens["title"][-1], self._tokens["body"][-1]]))
        self._tokens[PRF].append(terms.astype(np.int32))
        self._prf_counts.append(counts.astype(np.int32))
        self._doc_ids.append(int(doc_id))
        when = published_at if published_at is not None else fetched_at
        s = self._statics
        s["doc_words"].append(body.count(" ") + 1 if body else 0)
        s["url_depth"].append(url_depth(url))
        s["pagerank"].append(float(pagerank))
        s["when"].append(math.nan if when is None else float(when))
        s["lang"].append(self._langs.setdefault(lang, len(self._langs)))
        s["dup_cluster_size"].append(int(dup_cluster_size))
        s["quality"].append(float(quality))

    def write(self) -> None:
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        for name in (*FIELDS, PRF):
            parts = self._tokens[name]
            lengths = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
            offsets = np.zeros(len(parts) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            tokens = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
            np.save(forward_array(d, f"{name}.tokens"), tokens.astype(np.int32, copy=False))
            np.save(forward_array(d, f"{name}.offsets"), offsets)
        counts = np.concatenate(self._prf_counts) if self._prf_counts else np.zeros(0, dtype=np.int32)
        np.save(forward_array(d, f"{PRF}.counts"), counts.astype(np.int32, copy=False))
        np.save(forward_array(d, "doc_ids"), np.asarray(self._doc_ids, dtype=np.uint64))
        dtypes = {"when": np.float64, "pagerank": np.float64, "lang": np.int32, "quality": np.float64}
        for name, values in self._statics.items():
            np.save(forward_array(d, name), np.asarray(values, dtype=dtypes.get(name, np.int64)))
        terms = list(self._terms)
        np.save(
            forward_array(d, "term_hashes"),
            np.fromiter((term_hash(t) for t in terms), dtype=np.uint64, count=len(terms)),
        )
        write_text(forward_terms(d), "".join(f"{t}\n" for t in terms))
        manifest = {
            "format": "trawl-forward",
            "format_version": FORMAT_VERSION,
            "docs": len(self._doc_ids),
            "body_chars": self.body_chars,
            "side_chars": self.side_chars,
            "langs": list(self._langs),
        }
        write_text(forward_manifest(d), json.dumps(manifest))


def _segments(
    starts: NDArray[np.int64], lengths: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Flat positions of the ranges ``[start, start + length)`` and the range each belongs to."""
    total = int(lengths.sum())
    seg = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    if total == 0:
        return np.zeros(0, dtype=np.int64), seg
    first = np.cumsum(lengths) - lengths
    positions = np.arange(total, dtype=np.int64) - first[seg] + starts[seg]
    return positions, seg


class ForwardIndex:
    """A shard's forward index, memory-mapped (read-only; shared by request threads)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        manifest = json.loads(forward_manifest(self.directory).read_text())
        self.format_version = manifest.get("format_version")
        if self.format_version not in READABLE_VERSIONS:
            raise ValueError(f"{self.directory}: forward index format {self.format_version}")
        self.body_chars = int(manifest["body_chars"])
        self.side_chars = int(manifest["side_chars"])
        self.langs: tuple[str, ...] = tuple(manifest["langs"])

        def load(name: str) -> NDArray[Any]:
            # A plain ndarray view of the mapping: ``np.memmap``'s Python-level indexing
            # hooks cost more than the gathers themselves for a query's few hundred rows.
            array: NDArray[Any] = np.asarray(load_array(forward_array(self.directory, name), mmap_mode="r"))
            return array

        stored = (*FIELDS, PRF) if self.format_version >= 2 else FIELDS
        self._tokens = {f: load(f"{f}.tokens") for f in stored}
        self._offsets = {f: load(f"{f}.offsets") for f in stored}
        self._prf_counts = load(f"{PRF}.counts") if self.format_version >= 2 else None
        self.doc_ids = load("doc_ids")
        self._order = np.argsort(self.doc_ids, kind="stable")
        self._sorted_ids = np.asarray(self.doc_ids)[self._order]
        self._statics = {
            name: load(name)
            for name in _STATICS
            if name not in _OPTIONAL_STATICS or forward_array(self.directory, name).exists()
        }
        quality = self._statics.get("quality")
        self.demoted = quality is not None and bool(np.any(quality < 1.0))
        """Some page here has a quality below 1 (``retrieval.index.page_quality``)."""
        self.term_hashes = load("term_hashes")
        self.terms: tuple[str, ...] = tuple(forward_terms(self.directory).read_text().splitlines())
        self._term_ids = {t: i for i, t in enumerate(self.terms)}
        self._stale = read_stale(self.directory)
        """Documents updated in place: their text differs from their rows here, so they count
        as absent until the next build (compaction) writes the forward index again."""

    @classmethod
    def open_if_present(cls, directory: Path) -> Self | None:
        return cls(directory) if forward_manifest(directory).exists() else None

    def __len__(self) -> int:
        return len(self.doc_ids)

    def rows(self, doc_ids: Sequence[int]) -> NDArray[np.int64]:
        """Row of each document (-1 when this shard does not have it, or has an older version)."""
        wanted = np.asarray([int(d) for d in doc_ids], dtype=np.uint64)
        at = np.searchsorted(self._sorted_ids, wanted)
        at = np.minimum(at, max(len(self._sorted_ids) - 1, 0))
        if len(self._sorted_ids) == 0:
            return np.full(len(wanted), -1, dtype=np.int64)
        found = self._sorted_ids[at] == wanted
        if len(self._stale):
            found &= ~np.isin(wanted, self._stale)
        return np.where(found, self._order[at], -1).astype(np.int64)

    def term_ids(self, tokens: Sequence[str]) -> NDArray[np.int64]:
        """Id of each token in this shard's dictionary (-1: no document here has it)."""
        return np.asarray([self._term_ids.get(t, -1) for t in tokens], dtype=np.int64)

    def _positions(self, field: str, rows: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(flat positions of the rows' ``field`` tokens one after another, the row index of each)."""
        offsets = self._offsets[field]
        starts = np.asarray(offsets[rows], dtype=np.int64)
        lengths = np.asarray(offsets[rows + 1], dtype=np.int64) - starts
        return _segments(starts, lengths)

    def gather(self, field: str, rows: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """(token ids of the rows' ``field`` one after another, the row index of each)."""
        positions, seg = self._positions(field, rows)
        return np.asarray(self._tokens[field][positions], dtype=np.int64), seg

    def term_vectors(
        self, rows: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]] | None:
        """(candidate index, term id, count) of the rows' PRF term vectors; None in format 1."""
        if self._prf_counts is None:
            return None
        positions, seg = self._positions(PRF, rows)
        terms = np.asarray(self._tokens[PRF][positions], dtype=np.int64)
        return seg, terms, np.asarray(self._prf_counts[positions], dtype=np.int64)

    def tokens(self, doc_id: int, field: str) -> list[str]:
        """The analysed tokens of one document's field (inspection and tests)."""
        row = int(self.rows([doc_id])[0])
        if row < 0:
            raise KeyError(doc_id)
        ids, _ = self.gather(field, np.asarray([row]))
        return [self.terms[i] for i in ids]

    def static(self, name: str, rows: NDArray[np.int64]) -> NDArray[Any]:
        return np.asarray(self._statics[name][rows])

    def quality(self, doc_ids: Sequence[int]) -> NDArray[np.float64]:
        """Each document's static quality: 1 where this index has none (written before it, a
        document updated in place since, or one this shard lacks)."""
        out = np.ones(len(doc_ids), dtype=np.float64)
        stored = self._statics.get("quality")
        if stored is None or not self.demoted:
            return out
        rows = self.rows(doc_ids)
        found = rows >= 0
        out[found] = np.asarray(stored[rows[found]], dtype=np.float64)
        return out


def read_stale(directory: Path) -> NDArray[np.uint64]:
    """Ids of the documents updated in place since ``directory``'s forward index was written."""
    path = forward_stale(directory)
    if not path.exists():
        return np.zeros(0, dtype=np.uint64)
    stale: NDArray[np.uint64] = load_array(path).astype(np.uint64)
    return stale


def mark_stale(directory: Path, doc_ids: Iterable[int]) -> None:
    """Add ``doc_ids`` (replaced, added or deleted in place) to the forward index's stale set."""
    if not forward_manifest(directory).exists():
        return
    ids = np.fromiter((int(d) for d in doc_ids), dtype=np.uint64)
    if not len(ids):
        return
    merged = np.union1d(read_stale(directory), ids)
    write_with(forward_stale(directory), lambda tmp: _save(tmp, merged))


def _save(path: Path, array: NDArray[Any]) -> None:
    with path.open("wb") as handle:
        np.save(handle, array)
