"""Candidate features: the one implementation used to train, to serve and to log.

Training frames, the serving stage (``rerank/ltr.py``) and the feature log all call
:func:`compute_features`, so a feature never means one thing offline and another online.
:data:`SCHEMA` fixes names and order; a model refuses to load against another schema. Why:

- first-stage scores (BM25 overall and per field, cosine, ranks, reciprocal-rank fusion) and
  their ratio to the query's best candidate, comparable across queries and collections;
- text evidence BM25 ignores (query coverage per field, verbatim phrases and bigrams,
  proximity, title share) and static signals (PageRank, age, language, duplicates, URL depth);
- agreement with the other top candidates, in words (``prf_top5/10/20``) and in the
  embedding space (``dense_prf_top5``, which the packaged model does not use yet; DECISIONS 53).

Missing values are NaN (LightGBM learns a branch for them); text features read a bounded
body prefix (``FeatureContext.body_chars``), so the cost per candidate is bounded.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from core.types import DocId, Query
from retrieval.index.forward import BODY_CHARS, SIDE_CHARS, url_depth
from retrieval.index.forward_features import SHARD_COLUMNS, QueryTerms, ShardFeatures
from retrieval.index.lexical import StoredDoc
from retrieval.index.lexical_schema import TEXT_FIELDS
from retrieval.query.hybrid import Candidate, rrf_score
from retrieval.text.tokenizer import ENGLISH_STOPWORDS, MAX_TOKEN_CHARS, analyze, stem

logger = logging.getLogger(__name__)

FIELD_NAMES: tuple[str, ...] = TEXT_FIELDS
"""title, headings, body, anchors: the fields BM25 is scored on separately."""

SCHEMA: tuple[str, ...] = (
    # first-stage retrieval
    "bm25",
    "bm25_ratio",
    *(f"bm25_{f}" for f in FIELD_NAMES),
    "bm25_fields_ratio",
    "cosine",
    "cosine_gap",
    "lexical_rank",
    "vector_rank",
    "rrf",
    # text evidence
    *(f"coverage_{f}" for f in FIELD_NAMES),
    "phrase_match",
    "bigram_match",
    "min_window",
    "window_density",
    "title_match_ratio",
    # document and query
    "doc_words",
    "title_words",
    "url_depth",
    "pagerank",
    "age_days",
    "lang_match",
    "dup_cluster_size",
    "query_terms",
    # agreement with the other top candidates (pseudo-relevance feedback)
    *(f"prf_top{n}" for n in (5, 10, 20)),
    "dense_prf_top5",
)
"""Feature names, in column order. Changing it means retraining every model."""

INDEX: dict[str, int] = {name: i for i, name in enumerate(SCHEMA)}
PRF_DEPTHS: tuple[int, ...] = (5, 10, 20)
"""First-stage (RRF) top documents whose centroid the ``prf_top<n>`` features compare with."""
DENSE_PRF_DEPTHS: tuple[int, ...] = (5,)
"""The same for ``dense_prf_top<n>``. One depth: with 5, 10 and 20 (the lexical features'
depths) own-fold nDCG@10 rose less on cisi (.4478 against .4571 with 5 alone; cranfield
.4610 and .4612), a choice made on those reported figures (DECISIONS 53)."""
DOC_VECTOR_FEATURES = frozenset(f"dense_prf_top{top}" for top in DENSE_PRF_DEPTHS)
"""The features computed from the candidates' document vectors (NaN without them)."""


def reads_doc_vectors(features: Iterable[str]) -> bool:
    """Whether a model with these features needs the candidates' document vectors gathered."""
    return not DOC_VECTOR_FEATURES.isdisjoint(features)


RRF_K = 60
"""k of the ``rrf`` feature: part of the schema (a trained model saw this k), so it does not
follow the serving knob ``search.rrf_k``."""
FieldTokens = dict[str, list[str]]

_ASCII_WORD = re.compile(r"[a-z0-9]+")
_APOSTROPHE_IN_WORD = re.compile(r"(?<=\w)'(?=\w)")
_TOKEN_CACHE: dict[str, str] = {}
_TOKEN_CACHE_MAX = 200_000
_STOP = ""


def _token_table(words: list[str]) -> dict[str, str]:
    """The shared word → stem table (stopwords map to ""), holding every word of ``words``.

    Entries are only ever added, never removed, so concurrent requests can share it;
    once it is full, a private table serves the rest.
    """
    missing = set(words).difference(_TOKEN_CACHE)
    if not missing:
        return _TOKEN_CACHE
    table = _TOKEN_CACHE
    if len(_TOKEN_CACHE) + len(missing) > _TOKEN_CACHE_MAX:
        table = {}
        missing = set(words)
    for word in missing:
        if word in ENGLISH_STOPWORDS or len(word) > MAX_TOKEN_CHARS:
            table[word] = _STOP
        else:
            table[word] = stem(word)
    return table


def fast_analyze(text: str) -> list[str]:
    """Exactly :func:`retrieval.text.tokenizer.analyze`, 3-5x faster on ASCII text.

    Features tokenize the text of every candidate of every query; for ASCII text the
    Unicode folding is the identity, so lowercasing plus an ASCII word pattern and a
    cached stopword+stem table give the same tokens (a test pins the equality).
    Anything else goes through ``analyze`` itself.
    """
    if not text.isascii():
        return analyze(text)
    lowered = text.lower()
    if "'" in lowered:
        lowered = _APOSTROPHE_IN_WORD.sub("", lowered)
    words = _ASCII_WORD.findall(lowered)
    # map/filter stay in C: this line is most of the feature cost.
    return list(filter(None, map(_token_table(words).__getitem__, words)))


@dataclass(frozen=True, slots=True)
class FeatureContext:
    """What features depend on beyond the query and the document.

    ``now_s`` is passed in, never read from the clock inside: a logged feature row and
    its recomputation must agree, and tests must be reproducible.
    """

    now_s: float | None = None
    user_lang: str = "en"
    """Language a query without ``lang:`` is assumed to want."""
    body_chars: int = BODY_CHARS
    """Text features read this many characters of the body (BM25 saw all of it)."""
    side_chars: int = SIDE_CHARS
    """…and this many of the joined headings and of the joined anchor texts."""


@dataclass(frozen=True, slots=True)
class FeatureMatrix:
    """Feature rows of one query's candidates, row ``i`` for ``doc_ids[i]``."""

    doc_ids: tuple[DocId, ...]
    values: NDArray[np.float64]

    def row(self, doc_id: DocId) -> dict[str, float]:
        i = self.doc_ids.index(doc_id)
        return dict(zip(SCHEMA, (float(v) for v in self.values[i]), strict=True))


def compute_features(
    query: Query,
    candidates: Sequence[Candidate],
    docs: Mapping[DocId, StoredDoc],
    *,
    context: FeatureContext | None = None,
    terms: QueryTerms | None = None,
    shard: ShardFeatures | None = None,
) -> FeatureMatrix:
    """One row of :data:`SCHEMA` per candidate, in the candidates' order.

    With ``shard`` (the candidates' :class:`retrieval.index.forward.ShardFeatures`, row ``i``
    for candidate ``i``, computed by their shards from the forward index) the text and
    document features are taken from it and ``docs`` is not read; without, they are
    computed here from the stored documents. Both give the same values (a test pins it).
    A candidate whose stored document is missing (its shard failed after retrieval)
    keeps its retrieval features and gets NaN text and document features.

    >>> from core.types import Query
    >>> m = compute_features(Query("wing", terms=("wing",)), [], {})
    >>> m.values.shape == (0, len(SCHEMA))
    True
    """
    context = context or FeatureContext()
    terms = terms or QueryTerms.of(query)
    out = np.full((len(candidates), len(SCHEMA)), np.nan, dtype=np.float64)
    if not candidates:
        return FeatureMatrix((), out)
    _retrieval_features(candidates, out)
    out[:, INDEX["query_terms"]] = len(terms.terms)
    if shard is not None:
        if shard.doc_ids != tuple(c.doc_id for c in candidates):
            raise ValueError("shard features must have one row per candidate, in the candidates' order")
        _from_shard(query, shard, context, out)
        columns = prf_from_terms(shard, out[:, INDEX["rrf"]], tops=PRF_DEPTHS)
    else:
        query_set = frozenset(terms.terms)
        texts: list[list[str] | None] = []
        for i, candidate in enumerate(candidates):
            doc = docs.get(candidate.doc_id)
            text = None
            if doc is not None:
                text = _document_features(query, terms, query_set, doc, context, out[i])
            texts.append(text)
        columns = prf_similarity(texts, out[:, INDEX["rrf"]], tops=PRF_DEPTHS)
    for top, column in zip(PRF_DEPTHS, columns, strict=True):
        out[:, INDEX[f"prf_top{top}"]] = column
    dense = dense_prf([c.doc_vector for c in candidates], out[:, INDEX["rrf"]], tops=DENSE_PRF_DEPTHS)
    for top, column in zip(DENSE_PRF_DEPTHS, dense, strict=True):
        out[:, INDEX[f"dense_prf_top{top}"]] = column
    return FeatureMatrix(tuple(c.doc_id for c in candidates), out)


def _from_shard(
    query: Query, shard: ShardFeatures, context: FeatureContext, out: NDArray[np.float64]
) -> None:
    """Copy the shard-computed columns; add age and language match, which depend on the request."""
    for j, name in enumerate(SHARD_COLUMNS):
        out[:, INDEX[name]] = shard.values[:, j]
    if context.now_s is not None:
        out[:, INDEX["age_days"]] = np.maximum(0.0, (context.now_s - shard.when) / 86_400.0)
    wanted = query.lang or context.user_lang
    matches = {lang: lang_match(wanted, lang) for lang in set(shard.langs)}
    out[:, INDEX["lang_match"]] = [matches[lang] for lang in shard.langs]


def prf_similarity(
    texts: Sequence[list[str] | None], first_stage: NDArray[np.float64], *, tops: Sequence[int]
) -> list[NDArray[np.float64]]:
    """Cosine of each candidate's text to the centroid of the ``top`` first-stage candidates.

    Relevant documents resemble each other more than they resemble the query's stray
    matches (the idea behind pseudo-relevance feedback, RM3). Terms are weighted by
    tf × idf, the idf taken over the candidate set itself so that no collection
    statistics are needed at serving time. A top candidate is compared with the
    centroid of the *other* top candidates (leave-one-out), or it would partly match
    itself. One column per depth in ``tops``; NaN for a candidate without text.
    """
    n = len(texts)
    live_rows = [i for i, t in enumerate(texts) if t is not None]
    if len(live_rows) < 2:
        return [np.full(n, np.nan) for _ in tops]
    vocab: dict[str, int] = {}
    indptr = [0]
    indices: list[int] = []
    tfs: list[int] = []
    for i in live_rows:
        counts = Counter(texts[i])
        indices.extend(vocab.setdefault(t, len(vocab)) for t in counts)
        tfs.extend(counts.values())
        indptr.append(len(indices))
    return _prf(
        n,
        live_rows,
        np.asarray(indptr, dtype=np.int64),
        np.asarray(indices, dtype=np.int64),
        np.asarray(tfs, dtype=np.float64),
        len(vocab),
        first_stage,
        tops,
    )


def prf_from_terms(
    shard: ShardFeatures, first_stage: NDArray[np.float64], *, tops: Sequence[int]
) -> list[NDArray[np.float64]]:
    """:func:`prf_similarity` over the term vectors shards sent (terms as 64-bit hashes)."""
    n = len(shard.doc_ids)
    if n < 2:
        return [np.full(n, np.nan) for _ in tops]
    # Columns in hash order: _prf's sums run over each row's entries in entry order, so
    # how columns are numbered does not change a bit of the result.
    hashes, inverse = np.unique(shard.term_hash, return_inverse=True)
    columns = inverse.ravel().astype(np.int64)
    indptr = np.searchsorted(shard.term_row, np.arange(n + 1), side="left").astype(np.int64)
    return _prf(
        n,
        list(range(n)),
        indptr,
        columns,
        shard.term_tf.astype(np.float64),
        len(hashes),
        first_stage,
        tops,
    )


def _prf(
    n: int,
    live_rows: list[int],
    indptr: NDArray[np.int64],
    idx: NDArray[np.int64],
    tfs: NDArray[np.float64],
    width: int,
    first_stage: NDArray[np.float64],
    tops: Sequence[int],
) -> list[NDArray[np.float64]]:
    # One sparse row per candidate with text, kept as flat (row, column, weight) entries
    # and reduced with numpy: this runs per query over every candidate, and scipy's
    # sparse products cost ~5 ms a query in construction overhead alone. Every sum runs
    # over a row's entries in entry order (bincount), so both callers, whose entries
    # differ only in how columns are numbered, get the same bits.
    live = len(live_rows)
    row_of = np.repeat(np.arange(live, dtype=np.int64), np.diff(indptr))
    df = np.bincount(idx, minlength=width).astype(np.float64)
    weights = (1.0 + np.log(tfs)) * np.log1p(live / df[idx])
    norms = np.sqrt(np.bincount(row_of, weights=weights * weights, minlength=live))
    norms[norms == 0.0] = 1.0
    weights = weights / norms[row_of]
    top_rows = _top_rows(live_rows, first_stage, max(tops))
    sims = _cosine_to_rows(row_of, idx, weights, indptr, top_rows, live, width)
    return _leave_one_out(sims, top_rows, n, live_rows, tops)


def _top_rows(live_rows: list[int], first_stage: NDArray[np.float64], depth: int) -> list[int]:
    """Positions (among ``live_rows``) of the ``depth`` best live candidates by ``first_stage``."""
    position = {row: j for j, row in enumerate(live_rows)}
    ranking = np.argsort(-np.nan_to_num(first_stage, nan=-1.0), kind="stable")
    return [position[int(i)] for i in ranking if int(i) in position][:depth]


def _leave_one_out(
    sims: NDArray[np.float64], top_rows: list[int], n: int, live_rows: list[int], tops: Sequence[int]
) -> list[NDArray[np.float64]]:
    """Per depth: each live row's mean similarity to the top rows other than itself; NaN elsewhere."""
    columns = []
    for top in tops:
        k = min(top, len(top_rows))
        dot = sims[:, :k].sum(axis=1)
        others = np.full(len(live_rows), float(k))
        for j, row in enumerate(top_rows[:k]):
            dot[row] -= sims[row, j]  # leave one out: not compared with itself
            others[row] -= 1.0
        result = np.full(n, np.nan)
        result[live_rows] = np.divide(dot, others, out=np.zeros_like(dot), where=others > 0)
        columns.append(result)
    return columns


def dense_prf(
    vectors: Sequence[NDArray[np.float32] | None], first_stage: NDArray[np.float64], *, tops: Sequence[int]
) -> list[NDArray[np.float64]]:
    """:func:`prf_similarity` in the embedding space: each candidate's mean cosine to the
    document vectors of the ``top`` first-stage candidates (leave-one-out, unit vectors).

    NaN for a candidate without a vector. Each similarity is one row-wise product and sum
    (not a matrix product, whose BLAS summation order depends on how many rows it is
    given): a candidate's value must not change in its last bits with the other
    candidates of the request, or one shard and several would rank differently.
    """
    n = len(vectors)
    live = [(i, v) for i, v in enumerate(vectors) if v is not None]
    live_rows = [i for i, _ in live]
    if len(live_rows) < 2:
        return [np.full(n, np.nan) for _ in tops]
    matrix = np.stack([v for _, v in live]).astype(np.float32, copy=False)
    top_rows = _top_rows(live_rows, first_stage, max(tops))
    sims = np.empty((len(live_rows), len(top_rows)))
    for j, row in enumerate(top_rows):
        sims[:, j] = (matrix * matrix[row]).sum(axis=1, dtype=np.float64)
    return _leave_one_out(sims, top_rows, n, live_rows, tops)


def _cosine_to_rows(
    row_of: NDArray[np.int64],
    idx: NDArray[np.int64],
    weights: NDArray[np.float64],
    indptr: NDArray[np.int64],
    top_rows: Sequence[int],
    live: int,
    width: int,
) -> NDArray[np.float64]:
    """``sims[i, j]``: dot product of (unit) row ``i`` with row ``top_rows[j]``.

    The top rows are spread into a dense (top × their columns) block; every entry of
    every row then reads the top rows' weight of its column, and the products are
    summed per row.
    """
    sims = np.zeros((live, len(top_rows)))
    if not top_rows:
        return sims
    top_entries = [np.arange(indptr[r], indptr[r + 1]) for r in top_rows]
    top_columns = np.unique(idx[np.concatenate(top_entries)])
    slot = np.full(width, -1, dtype=np.int64)
    slot[top_columns] = np.arange(len(top_columns))
    dense = np.zeros((len(top_rows), len(top_columns)))
    for j, entries in enumerate(top_entries):
        dense[j, slot[idx[entries]]] = weights[entries]
    hit = np.flatnonzero(slot[idx] >= 0)
    if len(hit) == 0:
        return sims
    products = dense[:, slot[idx[hit]]].T * weights[hit, None]
    # Hit entries are grouped by row: one segmented sum (in entry order) per row that has any.
    rows = row_of[hit]
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    sims[rows[starts]] = np.add.reduceat(products, starts, axis=0)
    return sims


def _retrieval_features(candidates: Sequence[Candidate], out: NDArray[np.float64]) -> None:
    # Column-wise from per-candidate lists (this runs for every candidate of every query).
    bm25 = np.array([np.nan if c.bm25 is None else c.bm25 for c in candidates], dtype=np.float64)
    cosine = np.array([np.nan if c.cosine is None else c.cosine for c in candidates], dtype=np.float64)
    fields = np.array([_field_row(dict(c.field_bm25)) for c in candidates], dtype=np.float64)
    field_sum = fields.sum(axis=1)
    out[:, INDEX["bm25"]] = bm25
    out[:, INDEX["bm25_ratio"]] = _ratio_to_best(bm25)
    for j, name in enumerate(FIELD_NAMES):
        out[:, INDEX[f"bm25_{name}"]] = fields[:, j]
    out[:, INDEX["bm25_fields_ratio"]] = _ratio_to_best(field_sum)
    out[:, INDEX["cosine"]] = cosine
    if not np.all(np.isnan(cosine)):
        out[:, INDEX["cosine_gap"]] = cosine - np.nanmax(cosine)
    out[:, INDEX["lexical_rank"]] = [np.nan if c.lexical_rank is None else c.lexical_rank for c in candidates]
    out[:, INDEX["vector_rank"]] = [np.nan if c.vector_rank is None else c.vector_rank for c in candidates]
    out[:, INDEX["rrf"]] = [rrf_score(c, k=RRF_K) for c in candidates]


def _field_row(scores: dict[str, float]) -> list[float]:
    return [scores.get(name, 0.0) for name in FIELD_NAMES]


def _ratio_to_best(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """``value / max`` over the query's candidates (NaN stays NaN; all-zero gives 0)."""
    if np.all(np.isnan(values)):
        return values.copy()
    best = float(np.nanmax(values))
    if best <= 0.0:
        return np.where(np.isnan(values), np.nan, 0.0)
    return values / best


def _document_features(
    query: Query,
    terms: QueryTerms,
    query_set: frozenset[str],
    doc: StoredDoc,
    context: FeatureContext,
    row: NDArray[np.float64],
) -> list[str]:
    """Fill ``row``'s text and document features; returns the title + body tokens."""
    tokens: FieldTokens = {
        "title": fast_analyze(doc.title),
        "headings": fast_analyze(" ".join(doc.headings)[: context.side_chars]),
        "body": fast_analyze(doc.body[: context.body_chars]),
        "anchors": fast_analyze(" ".join(doc.anchors)[: context.side_chars]),
    }
    n_terms = len(terms.terms)
    for name in FIELD_NAMES:
        present = query_set.intersection(tokens[name])
        row[INDEX[f"coverage_{name}"]] = len(present) / n_terms if n_terms else 0.0
    text = tokens["title"] + tokens["body"]
    if terms.phrases:
        row[INDEX["phrase_match"]] = sum(_contains(text, p) for p in terms.phrases) / len(terms.phrases)
    if terms.bigrams:
        pairs = set(zip(text, text[1:], strict=False))
        row[INDEX["bigram_match"]] = len(terms.bigrams & pairs) / len(terms.bigrams)
    window, matched = min_window(text, query_set)
    if matched >= 2:
        row[INDEX["min_window"]] = window
        row[INDEX["window_density"]] = matched / window
    title = tokens["title"]
    row[INDEX["title_match_ratio"]] = sum(t in query_set for t in title) / len(title) if title else 0.0
    row[INDEX["doc_words"]] = doc.body.count(" ") + 1 if doc.body else 0
    row[INDEX["title_words"]] = len(title)
    row[INDEX["url_depth"]] = url_depth(doc.url)
    # Stored PageRank is scaled to mean 1 (training.pagerank) and always > 0 when
    # computed; 0 means "no link data", read as the average page rather than the worst.
    row[INDEX["pagerank"]] = doc.pagerank if doc.pagerank > 0 else 1.0
    row[INDEX["age_days"]] = age_days(doc, context.now_s)
    row[INDEX["lang_match"]] = lang_match(query.lang or context.user_lang, doc.lang)
    row[INDEX["dup_cluster_size"]] = doc.dup_cluster_size
    return text


def _contains(tokens: Sequence[str], phrase: Sequence[str]) -> bool:
    n = len(phrase)
    first = phrase[0]
    return any(
        tokens[i] == first and tuple(tokens[i : i + n]) == tuple(phrase) for i in range(len(tokens) - n + 1)
    )


def min_window(tokens: Sequence[str], wanted: frozenset[str]) -> tuple[int, int]:
    """(length of the smallest span covering every wanted term the text has, how many it has).

    Two pointers over the positions of wanted terms: O(len(tokens)).

    >>> min_window(["a", "x", "b", "a", "c", "b"], frozenset({"a", "b", "z"}))
    (2, 2)
    """
    positions = [(i, t) for i, t in enumerate(tokens) if t in wanted]
    need = len({t for _, t in positions})
    if need == 0:
        return 0, 0
    counts: dict[str, int] = {}
    have = 0
    best = len(tokens)
    left = 0
    for pos, term in positions:
        counts[term] = counts.get(term, 0) + 1
        if counts[term] == 1:
            have += 1
        while have == need:
            start = positions[left][0]
            best = min(best, pos - start + 1)
            left_term = positions[left][1]
            counts[left_term] -= 1
            if counts[left_term] == 0:
                have -= 1
            left += 1
    return best, need


def age_days(doc: StoredDoc, now_s: float | None) -> float:
    """Days since the page was published (else fetched); NaN when unknown."""
    when = doc.published_at if doc.published_at is not None else doc.fetched_at
    if when is None or now_s is None:
        return math.nan
    return max(0.0, (now_s - when) / 86_400.0)


def lang_match(wanted: str, doc_lang: str) -> float:
    """1 when the document's primary language is the wanted one, 0 when not, NaN unknown."""
    if not doc_lang or not wanted:
        return math.nan
    return 1.0 if doc_lang.lower().split("-", 1)[0] == wanted.lower().split("-", 1)[0] else 0.0
