"""A read-only lexical shard: BM25 search with field boosts, filters and paging, per-field
scores, and the stored documents behind the hits.

Queries are built by :mod:`retrieval.index.lexical_query`; the fields and the manifest
are :mod:`retrieval.index.lexical_schema`; shards are written by
:mod:`retrieval.index.lexical_writer`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy

from core.errors import IndexDamaged, IndexStateError
from core.types import DocId, Query, ScoredDoc, Section
from retrieval.index.collection_stats import CorpusStats, bm25_idf
from retrieval.index.forward import ForwardIndex
from retrieval.index.integrity import check_lexical, describe
from retrieval.index.layout import forward_dir
from retrieval.index.lexical_query import FieldBoosts, LexicalQueryBuilder, stat_terms
from retrieval.index.lexical_schema import LENGTH_FIELDS, TEXT_FIELDS, read_lexical_manifest, read_sections
from retrieval.text.stopword_search import CAPTIONS_FIELD

DF_CACHE_TERMS = 100_000
"""(field, term) document frequencies a shard keeps; past this the cache starts over."""
ADDRESS_MEMO_DOCS = 8_192
"""Recent search hits whose document address a shard remembers (see ``LexicalShard.stored_many``)."""


@dataclass(frozen=True, slots=True)
class StoredDoc:
    """What a shard keeps of a document for display and snippets."""

    doc_id: DocId
    url: str
    title: str
    body: str
    headings: tuple[str, ...]
    description: str
    external_id: str
    host: str
    lang: str
    filetype: str
    anchors: tuple[str, ...] = ()
    pagerank: float = 0.0
    published_at: float | None = None
    fetched_at: float | None = None
    dup_cluster_size: int = 1
    simhash: int = 0
    """The page's 64-bit SimHash (0: unknown); near-identical results collapse by it."""
    translation_group: str = ""
    """The key the page's translations share (``retrieval.index.translations``); ``""``: none,
    as in every index built before groups were kept."""
    sections: tuple[Section, ...] = ()
    """The page's sections that have an anchor, offsets into ``body``; none in an index built
    before sections were kept."""
    quality: float = 1.0
    """The page's static quality (``retrieval.index.page_quality``): what its BM25 is multiplied by."""
    link_density: float = 0.0
    quality_reasons: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LexicalResult:
    """One page of lexical hits plus the total number of matching documents."""

    total: int
    hits: tuple[ScoredDoc, ...]
    addresses: tuple[Any, ...]
    """Tantivy ``DocAddress`` per hit, valid for the searcher that produced them."""


def is_library_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust panic surfacing from Tantivy (``pyo3_runtime.PanicException``,
    a ``BaseException``: an ``except Exception`` lets it through). A garbled segment file
    panics in the middle of a search."""
    return type(exc).__name__ == "PanicException"


def _doc_id(value: object) -> DocId:
    """A doc id read back from Tantivy (typed loosely by its bindings)."""
    if not isinstance(value, int):
        raise IndexStateError(f"Corrupt index: a document has doc_id {value!r}.")
    return DocId(value)


_MAX_QUALITY_WINDOW = 16_384
"""The most plain-BM25 hits searched to place demoted pages exactly (a page rarely needs 2x)."""


class LexicalShard:
    """A read-only Tantivy shard: search, fetch stored documents, per-field scores."""

    def __init__(self, path: Path, *, boosts: FieldBoosts | None = None) -> None:
        self.path = Path(path)
        manifest = read_lexical_manifest(self.path)
        # Sizes only (a stat per file): a truncated file is refused before Tantivy maps it.
        if damage := check_lexical(self.path, content=False):
            raise IndexDamaged(
                f"The lexical shard at {self.path} is damaged: {describe(damage)}", tuple(damage)
            )
        try:
            self._index = tantivy.Index.open(str(self.path))
            self._searcher = self._index.searcher()
        except BaseException as exc:
            if not isinstance(exc, ValueError) and not is_library_panic(exc):
                raise
            raise IndexStateError(f"Cannot open the Tantivy index at {self.path}: {exc}") from exc
        self.boosts = boosts or FieldBoosts()
        self.real_docs = int(manifest.get("docs", 0))
        self.ballast_docs = int(manifest.get("ballast_docs", 0))
        nonempty = manifest.get("nonempty_fields", {})
        # A field no document has contributes nothing; skipping it halves query work on
        # collections without headings or anchors.
        self._live_fields = frozenset(f for f in LENGTH_FIELDS if nonempty.get(f, 1) > 0)
        self._local_n = int(self._searcher.num_docs)
        self._df: dict[tuple[str, str], int] = {}
        self._addresses: dict[DocId, Any] = {}
        self._queries = LexicalQueryBuilder(self._index.schema, self._live_fields, self._idf_ratio)
        try:
            self.forward = ForwardIndex.open_if_present(forward_dir(self.path))
        except (OSError, ValueError, KeyError) as exc:
            raise IndexStateError(f"Cannot open the forward index of {self.path}: {exc}") from exc
        """The shard's forward index (None in an index built before it existed: features then
        come from the stored documents, see :mod:`retrieval.index.lexical_writer`)."""
        self._qualities = self.forward if self.forward is not None and self.forward.demoted else None
        """Where some page here has a quality below 1, the forward index that holds it: its BM25 is
        multiplied by it (search, and every score of a document set)."""

    @property
    def num_docs(self) -> int:
        """Real documents (ballast excluded)."""
        return int(self._searcher.num_docs) - self.ballast_docs

    def doc_freqs(self, query: Query) -> dict[tuple[str, str], int]:
        """Local document frequency of every (field, term) the query scores with."""
        terms = stat_terms(query)
        # Every live field for every term, captions included: the broker caches frequencies
        # by term, so a term's entry must not depend on the query that first asked for it.
        return {(f, t): self.doc_freq(f, t) for f in LENGTH_FIELDS if f in self._live_fields for t in terms}

    def doc_freq(self, field: str, term: str) -> int:
        """Documents of this shard with ``term`` in ``field``, cached: the searcher never changes
        (an updated generation is opened as a new shard), and building one query asks for the
        same frequency once per field boost, per-field score and statistics request."""
        key = (field, term)
        df = self._df.get(key)
        if df is None:
            if len(self._df) >= DF_CACHE_TERMS:
                self._df = {}
            df = self._df[key] = int(self._searcher.doc_freq(field, term))
        return df

    def _idf_ratio(self, stats: CorpusStats | None, field: str, terms: Sequence[str]) -> float:
        """Boost turning this shard's idf into the collection's (1.0 without stats)."""
        if stats is None:
            return 1.0
        local = sum(bm25_idf(self._local_n, self.doc_freq(field, t)) for t in terms)
        return sum(stats.idf(field, t) for t in terms) / local if local > 0 else 1.0

    def caption_scores(
        self, query: Query, doc_id: DocId, *, stats: CorpusStats | None = None
    ) -> dict[str, float]:
        """What each stopword term and word pair of a short query adds to ``doc_id``'s BM25
        (explain's ``captions`` cells), by label (the analysed term; a pair in quotes)."""
        if CAPTIONS_FIELD not in self._live_fields:
            return {}
        only = self._queries.among([doc_id])
        scores: dict[str, float] = {}
        for label, part in self._queries.caption_parts(query, stats):
            for _, score in self._scored_among(part, only, 1):
                scores[label] = score
        return scores

    def build_query(
        self,
        query: Query,
        *,
        fields: Mapping[str, float] | None = None,
        stats: CorpusStats | None = None,
    ) -> tantivy.Query | None:
        """The Tantivy query for ``query`` (over ``fields``, else every field with the shard's
        boosts and the caption clauses); None when nothing in it can match."""
        boosts = dict(fields) if fields is not None else dict(self.boosts.items())
        return self._queries.build(query, boosts, stats=stats, captions=fields is None)

    # -- searching -----------------------------------------------------------------

    def search(
        self, query: Query, *, k: int = 10, offset: int = 0, stats: CorpusStats | None = None
    ) -> LexicalResult:
        """BM25 top ``k`` after ``offset``, with the total count of matches.

        With ``stats`` (collection-wide N and document frequencies) the scores equal
        those of one index over all shards' documents.
        """
        tq = self.build_query(query, stats=stats)
        if tq is None or k <= 0:
            return LexicalResult(0, (), ())
        if self._qualities is not None:
            return self._search_with_quality(tq, k, offset, self._qualities)
        result = self._searcher.search(tq, limit=k, count=True, offset=offset)
        addresses = [address for _, address in result.hits]
        ids = self._searcher.fast_field_values("doc_id", addresses) if addresses else []
        hits = tuple(
            ScoredDoc(_doc_id(doc_id), float(score))
            for (score, _), doc_id in zip(result.hits, ids, strict=True)
        )
        self._remember(hits, addresses)
        return LexicalResult(int(getattr(result, "count", 0) or 0), hits, tuple(addresses))

    def _search_with_quality(
        self, tq: tantivy.Query, k: int, offset: int, qualities: ForwardIndex
    ) -> LexicalResult:
        """The top ``k`` after ``offset`` by BM25 × the page's quality, exactly.

        Quality is at most 1, so a page outside the plain top ``n`` scores at most the ``n``-th
        plain score: once that is below the ``offset + k``-th rescored score, no page further
        down can enter. The window starts at three times what the page needs (one pass for the
        queries measured, bench/results/page-quality.md) and doubles until it holds. Ties keep
        Tantivy's order."""
        wanted = offset + k
        window = 3 * wanted + 1
        while True:
            result = self._searcher.search(tq, limit=window, count=True)
            addresses = [address for _, address in result.hits]
            ids = (
                [_doc_id(d) for d in self._searcher.fast_field_values("doc_id", addresses)]
                if addresses
                else []
            )
            quality = qualities.quality(ids)
            rescored = sorted(
                (
                    (float(score) * float(q), i)
                    for i, ((score, _), q) in enumerate(zip(result.hits, quality, strict=True))
                ),
                key=lambda pair: -pair[0],
            )
            exhausted = len(result.hits) < window
            # <=: a page further down scores at most the window's last plain score, so it could
            # only tie, and ties keep Tantivy's order; the cap bounds a pathological top.
            settled = len(rescored) >= wanted and float(result.hits[-1][0]) <= rescored[wanted - 1][0]
            if exhausted or settled or window >= _MAX_QUALITY_WINDOW:
                break
            window *= 2
        page = rescored[offset:wanted]
        hits = tuple(ScoredDoc(ids[i], score) for score, i in page)
        kept = [addresses[i] for _, i in page]
        self._remember(hits, kept)
        return LexicalResult(int(getattr(result, "count", 0) or 0), hits, tuple(kept))

    def facet_counts(self, query: Query, field: str) -> dict[str, int]:
        """How many documents the query matches hold each term of ``field`` (a facet)."""
        tq = self.build_query(query)
        if tq is None:
            return {}
        return dict(self._searcher.terms_with_prefix(field, "", filter_query=tq))

    def field_scores(
        self, query: Query, doc_ids: Sequence[DocId], *, stats: CorpusStats | None = None
    ) -> dict[str, dict[DocId, float]]:
        """BM25 of ``query`` restricted to each text field, for the given documents."""
        if not doc_ids:
            return {f: {} for f in TEXT_FIELDS}
        only = self._queries.among(doc_ids)
        scores: dict[str, dict[DocId, float]] = {}
        for field in TEXT_FIELDS:
            tq = self.build_query(query, fields={field: 1.0}, stats=stats)
            scores[field] = {}
            if tq is None:
                continue
            scores[field] = dict(self._scored_among(tq, only, len(doc_ids)))
        return scores

    def _scored_among(self, tq: tantivy.Query, only: tantivy.Query, limit: int) -> list[tuple[DocId, float]]:
        """(doc id, score of ``tq``) of the documents ``only`` selects that ``tq`` matches."""
        restricted = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, tq), (tantivy.Occur.Must, tantivy.Query.const_score_query(only, 0.0))]
        )
        result = self._searcher.search(restricted, limit=limit, count=False)
        addresses = [a for _, a in result.hits]
        ids = [_doc_id(d) for d in self._searcher.fast_field_values("doc_id", addresses)] if addresses else []
        if self._qualities is None:
            return [(doc_id, float(score)) for (score, _), doc_id in zip(result.hits, ids, strict=True)]
        quality = self._qualities.quality(ids)  # as search() scores them (retrieval.index.page_quality)
        return [
            (doc_id, float(score) * float(q))
            for (score, _), doc_id, q in zip(result.hits, ids, quality, strict=True)
        ]

    def matching(
        self, query: Query, doc_ids: Sequence[DocId], *, stats: CorpusStats | None = None
    ) -> set[DocId]:
        """Which of ``doc_ids`` the query matches (filters included): the documents that
        :meth:`search` would list at some depth."""
        tq = self.build_query(query, stats=stats) if doc_ids else None
        if tq is None:
            return set()
        return {doc_id for doc_id, _ in self._scored_among(tq, self._queries.among(doc_ids), len(doc_ids))}

    def filter_doc_ids(self, query: Query, doc_ids: Sequence[DocId]) -> set[DocId]:
        """Which of ``doc_ids`` pass the query's filters (site, lang, filetype, -terms).

        Vector candidates come from outside Tantivy; this applies the same filters to them.
        """
        if not doc_ids:
            return set()
        filters = self._queries.filters(query)
        if not filters:
            return set(doc_ids)
        tq = tantivy.Query.boolean_query([(tantivy.Occur.Must, self._queries.among(doc_ids)), *filters])
        result = self._searcher.search(tq, limit=len(doc_ids), count=False)
        addresses = [a for _, a in result.hits]
        ids = self._searcher.fast_field_values("doc_id", addresses) if addresses else []
        return {_doc_id(i) for i in ids}

    # -- stored documents ----------------------------------------------------------

    def stored_at(self, address: Any) -> StoredDoc:
        tdoc = self._searcher.doc(address)
        payload = json.loads(bytes(tdoc.get_first("payload") or b"{}").decode("utf-8"))
        quality = payload.get("quality") or {}
        return StoredDoc(
            doc_id=_doc_id(tdoc.get_first("doc_id")),
            url=payload["url"],
            title=payload["title"],
            body=payload["body"],
            headings=tuple(payload["headings"]),
            description=payload["description"],
            external_id=payload["external_id"],
            host=payload["host"],
            lang=payload["lang"],
            filetype=payload["filetype"],
            anchors=tuple(payload.get("anchors", ())),
            pagerank=float(payload.get("pagerank", 0.0)),
            published_at=payload.get("published_at"),
            fetched_at=payload.get("fetched_at"),
            dup_cluster_size=int(payload.get("dup_cluster_size", 1)),
            simhash=int(payload.get("simhash", 0)),
            translation_group=payload.get("translation_group", ""),
            sections=read_sections(payload.get("sections")),
            quality=float(quality.get("score", 1.0)),
            link_density=float(quality.get("link_density", 0.0)),
            quality_reasons=tuple(quality.get("reasons", ())),
        )

    def stored(self, doc_id: DocId) -> StoredDoc | None:
        """The stored document with this id, or None when this shard lacks it."""
        result = self._searcher.search(self._queries.term("doc_id", int(doc_id)), limit=1, count=False)
        if not result.hits:
            return None
        return self.stored_at(result.hits[0][1])

    def stored_many(self, doc_ids: Sequence[DocId]) -> dict[DocId, StoredDoc]:
        """The stored documents of ``doc_ids`` this shard holds.

        The documents shown on a page are almost always hits of a search this shard just
        answered, whose addresses it remembers: reading them directly skips the doc_id
        search. An address is only valid for the searcher that returned it, and this
        shard's searcher never changes.
        """
        if not doc_ids:
            return {}
        known = self._addresses
        addresses = []
        missing = []
        for doc_id in doc_ids:
            address = known.get(doc_id)
            if address is None:
                missing.append(doc_id)
            else:
                addresses.append(address)
        if missing:
            result = self._searcher.search(self._queries.among(missing), limit=len(missing), count=False)
            addresses.extend(a for _, a in result.hits)
        docs = (self.stored_at(a) for a in addresses)
        return {d.doc_id: d for d in docs}

    def _remember(self, hits: Sequence[ScoredDoc], addresses: Sequence[Any]) -> None:
        """Note the hits' addresses for ``stored_many`` (bounded: forgotten all at once when full)."""
        if len(self._addresses) + len(hits) > ADDRESS_MEMO_DOCS:
            self._addresses = {}
        memo = self._addresses
        for hit, address in zip(hits, addresses, strict=True):
            memo[hit.doc_id] = address

    def doc_id_for_url(self, url: str) -> DocId | None:
        result = self._searcher.search(self._queries.term("url", url), limit=1, count=False)
        if not result.hits:
            return None
        return _doc_id(self._searcher.fast_field_values("doc_id", [result.hits[0][1]])[0])

    def any_stored(self) -> StoredDoc | None:
        """One stored document, the cheapest to find (an example of what the shard holds)."""
        result = self._searcher.search(tantivy.Query.all_query(), limit=1, count=False)
        return self.stored_at(result.hits[0][1]) if result.hits else None

    def iter_stored(self) -> Iterator[StoredDoc]:
        """Every stored document (for embedding backfills and feature jobs)."""
        result = self._searcher.search(tantivy.Query.all_query(), limit=max(1, self.num_docs), count=False)
        for _, address in result.hits:
            yield self.stored_at(address)
