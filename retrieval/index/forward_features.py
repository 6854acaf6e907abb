"""The per-candidate features a shard computes from its forward index for one query.

:func:`shard_features` computes every :data:`SHARD_COLUMNS` value with numpy over all
candidates at once: tokens are gathered into one flat array with a segment index, and
each feature is a mask, a scatter or a segmented reduction over it. The result,
:class:`ShardFeatures`, travels to the broker (in process or over HTTP).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from core.types import DocId, Query
from retrieval.index.forward import FIELDS, ForwardIndex
from retrieval.text.tokenizer import analyze

SHARD_COLUMNS: tuple[str, ...] = (
    *(f"coverage_{f}" for f in FIELDS),
    "phrase_match",
    "bigram_match",
    "min_window",
    "window_density",
    "title_match_ratio",
    "doc_words",
    "title_words",
    "url_depth",
    "pagerank",
    "dup_cluster_size",
)
"""Features a shard computes for its candidates (names of :data:`rerank.features.SCHEMA`)."""
_COL = {name: i for i, name in enumerate(SHARD_COLUMNS)}


@dataclass(frozen=True, slots=True)
class QueryTerms:
    """The analysed query, computed once per query rather than once per candidate."""

    terms: tuple[str, ...]
    """Distinct positive terms, in query order."""
    bigrams: frozenset[tuple[str, str]]
    phrases: tuple[tuple[str, ...], ...]

    @classmethod
    def of(cls, query: Query) -> QueryTerms:
        sequence = [t for text in query.terms for t in analyze(text)]
        phrases = tuple(tuple(analyze(p)) for p in query.phrases if analyze(p))
        for phrase in phrases:
            sequence.extend(phrase)
        terms = tuple(dict.fromkeys(sequence))
        bigrams = {(a, b) for a, b in zip(sequence, sequence[1:], strict=False) if a != b}
        for phrase in phrases:
            bigrams.update(zip(phrase, phrase[1:], strict=False))
        return cls(terms=terms, bigrams=frozenset(bigrams), phrases=phrases)


@dataclass(frozen=True, slots=True)
class ShardFeatures:
    """Per-candidate features computed where the documents live, row ``i`` for ``doc_ids[i]``.

    ``values`` holds :data:`SHARD_COLUMNS`; ``when`` (publication or fetch time, NaN
    unknown) and ``langs`` stay raw because age and language match depend on the
    request (its clock, the user's language), which the broker's stage owns. The term
    vectors (title + body prefix, as (row, term hash, count) triples) let the broker
    compare candidates of all shards with each other (pseudo-relevance feedback).
    """

    doc_ids: tuple[DocId, ...]
    values: NDArray[np.float64]
    when: NDArray[np.float64]
    langs: tuple[str, ...]
    term_row: NDArray[np.int64]
    term_hash: NDArray[np.uint64]
    term_tf: NDArray[np.int64]

    @classmethod
    def merge(cls, parts: Sequence[ShardFeatures]) -> ShardFeatures:
        offsets = np.cumsum([0, *(len(p.doc_ids) for p in parts)])
        return cls(
            doc_ids=tuple(d for p in parts for d in p.doc_ids),
            values=np.vstack([p.values for p in parts]) if parts else np.zeros((0, len(SHARD_COLUMNS))),
            when=np.concatenate([p.when for p in parts]) if parts else np.zeros(0),
            langs=tuple(lang for p in parts for lang in p.langs),
            term_row=np.concatenate([p.term_row + o for p, o in zip(parts, offsets, strict=False)])
            if parts
            else np.zeros(0, dtype=np.int64),
            term_hash=np.concatenate([p.term_hash for p in parts]) if parts else np.zeros(0, dtype=np.uint64),
            term_tf=np.concatenate([p.term_tf for p in parts]) if parts else np.zeros(0, dtype=np.int64),
        )

    def select(self, doc_ids: Sequence[DocId]) -> ShardFeatures | None:
        """These candidates' rows, in this order; None when any of them is missing."""
        where = {d: i for i, d in enumerate(self.doc_ids)}
        if any(d not in where for d in doc_ids):
            return None
        picked = np.asarray([where[d] for d in doc_ids], dtype=np.int64)
        new_row = np.full(len(self.doc_ids), -1, dtype=np.int64)
        new_row[picked] = np.arange(len(picked))
        mapped = new_row[self.term_row] if len(self.term_row) else self.term_row
        keep = mapped >= 0
        order = np.argsort(mapped[keep], kind="stable")
        return ShardFeatures(
            doc_ids=tuple(doc_ids),
            values=self.values[picked],
            when=self.when[picked],
            langs=tuple(self.langs[i] for i in picked),
            term_row=mapped[keep][order],
            term_hash=self.term_hash[keep][order],
            term_tf=self.term_tf[keep][order],
        )

    def to_wire(self) -> dict[str, Any]:
        def b64(a: NDArray[Any], dtype: Any) -> str:
            return base64.b64encode(np.ascontiguousarray(a, dtype=dtype).tobytes()).decode("ascii")

        return {
            "doc_ids": [str(int(d)) for d in self.doc_ids],
            "values": b64(self.values, "<f8"),
            "when": b64(self.when, "<f8"),
            "langs": list(self.langs),
            "term_row": b64(self.term_row, "<i4"),
            "term_hash": b64(self.term_hash, "<u8"),
            "term_tf": b64(self.term_tf, "<i4"),
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ShardFeatures:
        def arr(key: str, dtype: str) -> NDArray[Any]:
            return np.frombuffer(base64.b64decode(data[key]), dtype=dtype)

        doc_ids = tuple(DocId(int(d)) for d in data["doc_ids"])
        return cls(
            doc_ids=doc_ids,
            values=arr("values", "<f8").astype(np.float64).reshape(len(doc_ids), len(SHARD_COLUMNS)),
            when=arr("when", "<f8").astype(np.float64),
            langs=tuple(str(x) for x in data["langs"]),
            term_row=arr("term_row", "<i4").astype(np.int64),
            term_hash=arr("term_hash", "<u8").astype(np.uint64),
            term_tf=arr("term_tf", "<i4").astype(np.int64),
        )


def _term_table(ids: NDArray[np.int64], vocabulary: int) -> NDArray[np.int32]:
    """``table[token id]``: the index in ``ids`` of that term, −1 for a term not in the query.

    Made per query (request threads share the index): matching every candidate token
    is then one gather instead of a tokens × terms comparison.
    """
    table = np.full(vocabulary, -1, dtype=np.int32)
    live = np.flatnonzero(ids >= 0)
    table[ids[live]] = live
    return table


def _term_hits(
    tokens: NDArray[np.int64], table: NDArray[np.int32]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(positions in ``tokens`` holding a query term, that term's index), by position."""
    which = table[tokens]
    positions = np.flatnonzero(which >= 0)
    return positions, which[positions].astype(np.int64)


def _presence(
    tokens: NDArray[np.int64], seg: NDArray[np.int64], table: NDArray[np.int32], n_terms: int, n: int
) -> NDArray[np.bool_]:
    """``present[i, j]``: candidate ``i``'s tokens include query term ``j``."""
    present = np.zeros((n, n_terms), dtype=bool)
    hit_pos, hit_term = _term_hits(tokens, table)
    present[seg[hit_pos], hit_term] = True
    return present


def shard_features(
    forward: ForwardIndex, terms: QueryTerms, doc_ids: Sequence[DocId]
) -> ShardFeatures | None:
    """The :data:`SHARD_COLUMNS` of ``doc_ids`` (all in this shard) for one query, vectorised.

    None when one of them has no current row here (added or updated in place since the
    forward index was written): the caller then computes features from stored text.
    """
    n = len(doc_ids)
    rows = forward.rows(doc_ids)
    if np.any(rows < 0):
        return None
    out = np.full((n, len(SHARD_COLUMNS)), np.nan, dtype=np.float64)
    qids = forward.term_ids(terms.terms)
    table = _term_table(qids, len(forward.terms))
    n_terms = len(terms.terms)
    gathered = {f: forward.gather(f, rows) for f in FIELDS}
    for name in FIELDS:
        tokens, seg = gathered[name]
        present = _presence(tokens, seg, table, n_terms, n)
        out[:, _COL[f"coverage_{name}"]] = present.sum(axis=1) / n_terms if n_terms else 0.0
    # Title then body prefix of every candidate, one after another.
    t_tok, t_seg = gathered["title"]
    b_tok, b_seg = gathered["body"]
    text, seg = _title_then_body(t_tok, t_seg, b_tok, b_seg, n)
    same_next = seg[1:] == seg[:-1]
    if terms.phrases:
        found = np.zeros(n, dtype=np.float64)
        for phrase in terms.phrases:
            found += _phrase_found(forward, text, seg, phrase, n)
        out[:, _COL["phrase_match"]] = found / len(terms.phrases)
    if terms.bigrams:
        out[:, _COL["bigram_match"]] = _bigram_matches(forward, text, seg, same_next, terms, n) / len(
            terms.bigrams
        )
    window, matched = _min_windows(text, seg, table, n_terms, n)
    has = matched >= 2
    out[has, _COL["min_window"]] = window[has]
    out[has, _COL["window_density"]] = matched[has] / window[has]
    title_len = np.bincount(t_seg, minlength=n).astype(np.float64)
    in_query = table[t_tok] >= 0
    title_hits = np.bincount(t_seg[in_query], minlength=n).astype(np.float64)
    out[:, _COL["title_match_ratio"]] = np.divide(title_hits, title_len, out=np.zeros(n), where=title_len > 0)
    out[:, _COL["title_words"]] = title_len
    out[:, _COL["doc_words"]] = forward.static("doc_words", rows)
    out[:, _COL["url_depth"]] = forward.static("url_depth", rows)
    pagerank = forward.static("pagerank", rows).astype(np.float64)
    # Stored PageRank is scaled to mean 1 and > 0 when computed; 0 means "no link data",
    # read as the average page rather than the worst.
    out[:, _COL["pagerank"]] = np.where(pagerank > 0, pagerank, 1.0)
    out[:, _COL["dup_cluster_size"]] = forward.static("dup_cluster_size", rows)
    # Term vectors for PRF: distinct (candidate, term) pairs of title + body prefix, in
    # order of first occurrence (the order the stored-text path counts them in, so the
    # broker's sums run in the same order and give the same bits).
    stored = forward.term_vectors(rows)
    if stored is not None:
        term_row, local, counts = stored
    else:
        width = max(len(forward.terms), 1)
        keys, first, counts = np.unique(seg * width + text, return_index=True, return_counts=True)
        by_first = np.argsort(first, kind="stable")
        keys, counts = keys[by_first], counts[by_first]
        term_row, local = keys // width, keys % width
    langs = forward.static("lang", rows)
    return ShardFeatures(
        doc_ids=tuple(DocId(int(d)) for d in doc_ids),
        values=out,
        when=forward.static("when", rows).astype(np.float64),
        langs=tuple([forward.langs[i] for i in langs.tolist()]),
        term_row=term_row.astype(np.int64),
        term_hash=np.asarray(forward.term_hashes[local], dtype=np.uint64),
        term_tf=counts.astype(np.int64),
    )


def _title_then_body(
    t_tok: NDArray[np.int64],
    t_seg: NDArray[np.int64],
    b_tok: NDArray[np.int64],
    b_seg: NDArray[np.int64],
    n: int,
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each candidate's title tokens then its body tokens, candidates one after another.

    Both inputs are already grouped by candidate, so every token's place is known: a
    scatter, not a sort of the concatenation.
    """
    t_len = np.bincount(t_seg, minlength=n)
    b_len = np.bincount(b_seg, minlength=n)
    both = t_len + b_len
    start = np.cumsum(both) - both
    text = np.empty(int(both.sum()), dtype=np.int64)
    t_dst = start[t_seg] + np.arange(len(t_tok)) - (np.cumsum(t_len) - t_len)[t_seg]
    b_dst = start[b_seg] + t_len[b_seg] + np.arange(len(b_tok)) - (np.cumsum(b_len) - b_len)[b_seg]
    text[t_dst] = t_tok
    text[b_dst] = b_tok
    return text, np.repeat(np.arange(n, dtype=np.int64), both)


def _phrase_found(
    forward: ForwardIndex,
    text: NDArray[np.int64],
    seg: NDArray[np.int64],
    phrase: Sequence[str],
    n: int,
) -> NDArray[np.float64]:
    """1.0 for each candidate whose title + body prefix holds ``phrase`` verbatim."""
    ids = forward.term_ids(phrase)
    size = len(ids)
    if np.any(ids < 0) or len(text) < size:
        return np.zeros(n)
    starts = len(text) - size + 1
    ok = np.ones(starts, dtype=bool)
    for j, term in enumerate(ids):
        ok &= text[j : j + starts] == term
        ok &= seg[j : j + starts] == seg[:starts]
    found = np.zeros(n)
    found[seg[:starts][ok]] = 1.0
    return found


def _bigram_matches(
    forward: ForwardIndex,
    text: NDArray[np.int64],
    seg: NDArray[np.int64],
    same_next: NDArray[np.bool_],
    terms: QueryTerms,
    n: int,
) -> NDArray[np.float64]:
    """How many of the query's bigrams each candidate's title + body prefix contains."""
    width = max(len(forward.terms), 1)
    wanted = []
    for a, b in terms.bigrams:
        ia, ib = forward.term_ids((a, b))
        if ia >= 0 and ib >= 0:
            wanted.append(int(ia) * width + int(ib))
    if not wanted or len(text) < 2:
        return np.zeros(n)
    pairs = text[:-1] * width + text[1:]
    hit = same_next & np.isin(pairs, np.asarray(wanted, dtype=np.int64))
    span = width * width
    keys = np.unique(seg[:-1][hit] * span + pairs[hit])
    return np.bincount(keys // span, minlength=n).astype(np.float64)


def _min_windows(
    text: NDArray[np.int64], seg: NDArray[np.int64], table: NDArray[np.int32], n_terms: int, n: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per candidate: (smallest span covering every query term its text has, how many it has).

    For each position holding a query term, the last position of every term at or before
    it (a running maximum per term; a value from an earlier candidate is before the
    candidate's start, so it reads as "not seen yet"). A window ends there when every
    term the candidate has was seen; its length is the distance to the oldest of them.
    A position holds one term at most, so the term positions are already distinct and
    in order.
    """
    window = np.zeros(n)
    matched = np.zeros(n)
    if len(text) == 0 or n_terms == 0:
        return window, matched
    positions, term = _term_hits(text, table)
    if len(positions) == 0:
        return window, matched
    present = np.zeros((n, n_terms), dtype=bool)
    present[seg[positions], term] = True
    matched = present.sum(axis=1).astype(np.float64)
    last = np.full((len(positions), n_terms), -1, dtype=np.int64)
    last[np.arange(len(positions)), term] = positions
    np.maximum.accumulate(last, axis=0, out=last)
    cand = seg[positions]
    seg_start = np.searchsorted(seg, np.arange(n), side="left")
    start = seg_start[cand]
    need = present[cand]
    seen = last >= start[:, None]
    complete = np.all(seen | ~need, axis=1)
    oldest = np.where(need, last, np.iinfo(np.int64).max).min(axis=1)
    lengths = (positions - oldest + 1).astype(np.float64)
    best = np.full(n, np.inf)
    np.minimum.at(best, cand[complete], lengths[complete])
    text_len = np.bincount(seg, minlength=n).astype(np.float64)
    window = np.where(np.isfinite(best), best, text_len)
    return window, matched
