"""Tantivy lexical shard: schema, writer, BM25 search with field boosts, filters, paging.

Text is analysed in Python (:mod:`retrieval.text.tokenizer`) and indexed with Tantivy's
``whitespace`` tokenizer, positions kept so phrases work. The original title, URL,
headings and body are kept as one stored JSON payload for snippets and display. The
query is built here as a boolean query of boosted term queries, never by Tantivy's
parser, so nothing a user types can be a syntax error, and a word repeated in the
query weighs more (as in bm25s and Lucene; Tantivy's parser collapses repeats).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

import tantivy

from core.atomic import write_text
from core.errors import IndexStateError, ManifestError
from core.settings import SearchSettings
from core.types import DocId, Document, Query, ScoredDoc
from retrieval.index.collection_stats import BALLAST_TOKEN, CorpusStats, bm25_idf
from retrieval.index.forward import ForwardIndex, ForwardWriter, mark_stale
from retrieval.index.layout import forward_dir, lexical_manifest
from retrieval.index.vocabulary import VocabularyCounter
from retrieval.text.stopword_search import CAPTION_WEIGHT, CAPTIONS_FIELD, stopword_search
from retrieval.text.tokenizer import analyze, analyzed_text, stems, words

logger = logging.getLogger(__name__)

FORMAT_VERSION = 2
"""2: the ``captions`` field (titles and headings with their stopwords, retrieval.text.stopword_search)."""
TEXT_FIELDS: tuple[str, ...] = ("title", "headings", "body", "anchors")
"""The fields every query and every per-field feature scores."""
LENGTH_FIELDS: tuple[str, ...] = (*TEXT_FIELDS, CAPTIONS_FIELD)
"""Every indexed text field: what ballast and the lengths table keep per document."""
MAX_HEADINGS_CHARS = 20_000
MAX_BODY_CHARS = 1_000_000
"""Body text past this is neither indexed nor stored: a search page is not an archive."""
DF_CACHE_TERMS = 100_000
"""(field, term) document frequencies a shard keeps; past this the cache starts over."""
ADDRESS_MEMO_DOCS = 8_192
"""Recent search hits whose document address a shard remembers (see ``LexicalShard.stored_many``)."""


@lru_cache(maxsize=8192)
def analysed(text: str) -> tuple[str, ...]:
    """:func:`analyze` of a piece of query text, memoised: a query's words are analysed by the
    broker, each shard (statistics, query, per-field scores) and the snippets alike."""
    return tuple(analyze(text))


def stat_terms(query: Query) -> frozenset[str]:
    """Every analysed term whose document frequency scores ``query`` (phrases, synonyms and a
    short query's stopwords too)."""
    terms: set[str] = set()
    for text in (*query.terms, *query.phrases, *(text for text, _ in query.expansions)):
        terms.update(analysed(text))
    terms.update(stopword_search(query).terms)
    return frozenset(terms)


@dataclass(frozen=True, slots=True)
class FieldBoosts:
    """Per-field multipliers of BM25.

    The title is indexed inside ``body`` as well (a page's title is part of its text),
    so a title match weighs ``body + title``: effectively title 1.5 > headings 1.4
    (headings are in the extracted body too) > anchors 1.2 > body 1.0. The title value
    was chosen on cisi and reported on cranfield (and the other way round) — see README.
    """

    title: float = 0.5
    headings: float = 0.4
    body: float = 1.0
    anchors: float = 1.2

    @classmethod
    def from_settings(cls, s: SearchSettings) -> Self:
        return cls(s.title_boost, s.headings_boost, s.body_boost, s.anchors_boost)

    def items(self) -> tuple[tuple[str, float], ...]:
        return (
            ("title", self.title),
            ("headings", self.headings),
            ("body", self.body),
            ("anchors", self.anchors),
        )


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


@dataclass(frozen=True, slots=True)
class LexicalResult:
    """One page of lexical hits plus the total number of matching documents."""

    total: int
    hits: tuple[ScoredDoc, ...]
    addresses: tuple[Any, ...]
    """Tantivy ``DocAddress`` per hit, valid for the searcher that produced them."""


def _doc_id(value: object) -> DocId:
    """A doc id read back from Tantivy (typed loosely by its bindings)."""
    if not isinstance(value, int):
        raise IndexStateError(f"Corrupt index: a document has doc_id {value!r}.")
    return DocId(value)


def build_schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("doc_id", stored=True, indexed=True, fast=True)
    sb.add_text_field("url", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("external_id", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("site", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("lang", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("filetype", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("kind", stored=False, tokenizer_name="raw", index_option="basic")
    for name in LENGTH_FIELDS:
        sb.add_text_field(name, stored=False, tokenizer_name="whitespace", index_option="position")
    sb.add_float_field("pagerank", stored=False, fast=True)
    sb.add_float_field("published_at", stored=False, fast=True)
    sb.add_unsigned_field("body_words", stored=False, fast=True)
    sb.add_bytes_field("payload", stored=True)
    return sb.build()


def host_suffixes(host: str) -> list[str]:
    """``docs.python.org`` → ``[docs.python.org, python.org, org]``: what ``site:`` matches."""
    host = host.lower().strip(".")
    if host.startswith("www."):
        host = host[4:]
    parts = host.split(".") if host else []
    return [".".join(parts[i:]) for i in range(len(parts))]


def explicit_port(url: str) -> int | None:
    """The port a URL names (``site:host:port`` matches it); None for the scheme's default."""
    try:
        port = urlsplit(url).port
    except ValueError:
        return None
    return port if port not in (None, 80, 443) else None


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

    def _document(self, doc: Document) -> tuple[tantivy.Document, str]:
        """The Tantivy document of ``doc`` and its normalised body; counts its field lengths."""
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
        tdoc.add_bytes("payload", json.dumps(payload, ensure_ascii=False).encode("utf-8"))
        return tdoc, body

    def add(self, doc: Document) -> None:
        tdoc, body = self._document(doc)
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
        tdoc, _ = self._document(doc)
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
        mark_stale(forward_dir(self.path), self._changed_in_place)
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
        # Replaced, not rewritten where it stands: serving processes open this shard while
        # it is updated, and a kill mid-write must leave the previous manifest.
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


def read_lexical_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the lexical shard at ``path``; ``ManifestError`` when there is none or
    it has another format (reading it costs nothing next to opening the shard)."""
    manifest_path = lexical_manifest(path)
    if not manifest_path.exists():
        raise ManifestError(
            f"{path} is not a Trawl lexical index (no {manifest_path.name}); build one with `trawl index`."
        )
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ManifestError(
            f"{path} has index format {manifest.get('format_version')}, "
            f"this Trawl reads {FORMAT_VERSION}; rebuild it with `trawl index`."
        )
    return manifest


class LexicalShard:
    """A read-only Tantivy shard: search, fetch stored documents, per-field scores."""

    def __init__(self, path: Path, *, boosts: FieldBoosts | None = None) -> None:
        self.path = Path(path)
        manifest = read_lexical_manifest(self.path)
        try:
            self._index = tantivy.Index.open(str(self.path))
        except ValueError as exc:
            raise IndexStateError(f"Cannot open the Tantivy index at {self.path}: {exc}") from exc
        self._schema = self._index.schema
        self._searcher = self._index.searcher()
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
        self.forward = ForwardIndex.open_if_present(forward_dir(self.path))
        """The shard's forward index (None in an index built before it existed: features then
        come from the stored documents, see :func:`write_forward_index`)."""

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

    # -- query building -------------------------------------------------------------

    def _term(self, field: str, value: str | int) -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, field, value)

    def _among(self, doc_ids: Sequence[DocId]) -> tantivy.Query:
        """Matches exactly ``doc_ids``: a disjunction of doc_id terms.

        Not ``term_set_query``, which scans the shard's whole doc_id dictionary (2 ms
        per search at 50K documents, growing with the shard); term lookups cost what
        the ids are (0.4 ms for 170 ids).
        """
        return tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, self._term("doc_id", int(d))) for d in doc_ids]
        )

    def _in_any_field(
        self, tokens: Sequence[str], fields: Sequence[str], stats: CorpusStats | None = None
    ) -> tantivy.Query:
        """A term (one token) or exact phrase (several) in any of ``fields``."""
        if len(tokens) == 1:
            parts = [self._term(f, tokens[0]) for f in fields]
        else:
            parts = [tantivy.Query.phrase_query(self._schema, f, list(tokens)) for f in fields]
        if stats is not None:
            parts = [
                tantivy.Query.boost_query(p, self._idf_ratio(stats, f, tokens))
                for p, f in zip(parts, fields, strict=True)
            ]
        return tantivy.Query.boolean_query([(tantivy.Occur.Should, p) for p in parts])

    def _filters(self, query: Query) -> list[tuple[Any, tantivy.Query]]:
        clauses: list[tuple[Any, tantivy.Query]] = []
        zero = tantivy.Query.const_score_query
        if query.site:
            clauses.append((tantivy.Occur.Must, zero(self._term("site", query.site), 0.0)))
        if query.lang:
            clauses.append((tantivy.Occur.Must, zero(self._term("lang", query.lang), 0.0)))
        if query.filetype:
            clauses.append((tantivy.Occur.Must, zero(self._term("filetype", query.filetype), 0.0)))
        for item in query.excluded:
            tokens = analysed(item)
            if tokens:
                live = [f for f in TEXT_FIELDS if f in self._live_fields]
                clauses.append((tantivy.Occur.MustNot, self._in_any_field(tokens, live)))
        return clauses

    def scoring_terms(self, query: Query) -> Counter[str]:
        """Analysed positive terms with their query frequency (phrase words included)."""
        counts: Counter[str] = Counter()
        for text in (*query.terms, *query.phrases):
            counts.update(analysed(text))
        return counts

    def _caption_parts(self, query: Query, stats: CorpusStats | None) -> list[tuple[str, tantivy.Query]]:
        """A short query's stopwords as terms and in word pairs as phrases, in ``captions``
        (:mod:`retrieval.text.stopword_search`), each with a label; nothing for a long query."""
        search = stopword_search(query)
        parts: list[tuple[str, tantivy.Query]] = []
        for term in search.terms:
            weight = CAPTION_WEIGHT * self._idf_ratio(stats, CAPTIONS_FIELD, (term,))
            parts.append((term, tantivy.Query.boost_query(self._term(CAPTIONS_FIELD, term), weight)))
        for pair in search.phrases:
            weight = CAPTION_WEIGHT * self._idf_ratio(stats, CAPTIONS_FIELD, pair)
            phrase = tantivy.Query.phrase_query(self._schema, CAPTIONS_FIELD, list(pair))
            parts.append((f'"{" ".join(pair)}"', tantivy.Query.boost_query(phrase, weight)))
        return parts

    def _caption_clauses(self, query: Query, stats: CorpusStats | None) -> list[tuple[Any, tantivy.Query]]:
        return [(tantivy.Occur.Should, q) for _, q in self._caption_parts(query, stats)]

    def caption_scores(
        self, query: Query, doc_id: DocId, *, stats: CorpusStats | None = None
    ) -> dict[str, float]:
        """What each stopword term and word pair of a short query adds to ``doc_id``'s BM25
        (explain's ``captions`` cells), by label (the analysed term; a pair in quotes)."""
        if CAPTIONS_FIELD not in self._live_fields:
            return {}
        only = self._among([doc_id])
        scores: dict[str, float] = {}
        for label, part in self._caption_parts(query, stats):
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
        """The Tantivy query for ``query``; None when nothing in it can match."""
        boosts = dict(fields) if fields is not None else dict(self.boosts.items())
        boosts = {f: b for f, b in boosts.items() if f in self._live_fields}
        should: list[tuple[Any, tantivy.Query]] = []
        for term, count in self.scoring_terms(query).items():
            for field, boost in boosts.items():
                weight = boost * count * self._idf_ratio(stats, field, (term,))
                q = tantivy.Query.boost_query(self._term(field, term), weight)
                should.append((tantivy.Occur.Should, q))
        for text, share in query.expansions:
            # A synonym weighs ``share`` of what the term itself would (Query.expansions).
            tokens = analysed(text)
            if len(tokens) == 1:
                for field, boost in boosts.items():
                    weight = share * boost * self._idf_ratio(stats, field, tokens)
                    q = tantivy.Query.boost_query(self._term(field, tokens[0]), weight)
                    should.append((tantivy.Occur.Should, q))
            elif tokens and boosts:
                q = tantivy.Query.boost_query(self._in_any_field(tokens, list(boosts), stats), share)
                should.append((tantivy.Occur.Should, q))
        if fields is None and CAPTIONS_FIELD in self._live_fields:
            should.extend(self._caption_clauses(query, stats))
        # The scoring disjunction is itself required: beside Must filters, bare Should
        # clauses would turn optional and let filter-only matches through.
        clauses: list[tuple[Any, tantivy.Query]] = []
        if should:
            clauses.append((tantivy.Occur.Must, tantivy.Query.boolean_query(should)))
        for phrase in query.phrases:
            tokens = analysed(phrase)
            if tokens and boosts:
                clauses.append((tantivy.Occur.Must, self._in_any_field(tokens, list(boosts), stats)))
        has_positive = bool(clauses)
        filters = self._filters(query)
        if not has_positive:
            if query.is_empty and any(o == tantivy.Occur.Must for o, _ in filters):
                clauses.append((tantivy.Occur.Must, tantivy.Query.all_query()))
            else:
                return None
        return tantivy.Query.boolean_query(clauses + filters)

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
        result = self._searcher.search(tq, limit=k, count=True, offset=offset)
        addresses = [address for _, address in result.hits]
        ids = self._searcher.fast_field_values("doc_id", addresses) if addresses else []
        hits = tuple(
            ScoredDoc(_doc_id(doc_id), float(score))
            for (score, _), doc_id in zip(result.hits, ids, strict=True)
        )
        self._remember(hits, addresses)
        return LexicalResult(int(getattr(result, "count", 0) or 0), hits, tuple(addresses))

    def field_scores(
        self, query: Query, doc_ids: Sequence[DocId], *, stats: CorpusStats | None = None
    ) -> dict[str, dict[DocId, float]]:
        """BM25 of ``query`` restricted to each text field, for the given documents."""
        if not doc_ids:
            return {f: {} for f in TEXT_FIELDS}
        only = self._among(doc_ids)
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
        ids = self._searcher.fast_field_values("doc_id", addresses) if addresses else []
        return [(_doc_id(doc_id), float(score)) for (score, _), doc_id in zip(result.hits, ids, strict=True)]

    def matching(
        self, query: Query, doc_ids: Sequence[DocId], *, stats: CorpusStats | None = None
    ) -> set[DocId]:
        """Which of ``doc_ids`` the query matches (filters included): the documents that
        :meth:`search` would list at some depth."""
        tq = self.build_query(query, stats=stats) if doc_ids else None
        if tq is None:
            return set()
        return {doc_id for doc_id, _ in self._scored_among(tq, self._among(doc_ids), len(doc_ids))}

    def filter_doc_ids(self, query: Query, doc_ids: Sequence[DocId]) -> set[DocId]:
        """Which of ``doc_ids`` pass the query's filters (site, lang, filetype, -terms).

        Vector candidates come from outside Tantivy; this applies the same filters to them.
        """
        if not doc_ids:
            return set()
        filters = self._filters(query)
        if not filters:
            return set(doc_ids)
        tq = tantivy.Query.boolean_query([(tantivy.Occur.Must, self._among(doc_ids)), *filters])
        result = self._searcher.search(tq, limit=len(doc_ids), count=False)
        addresses = [a for _, a in result.hits]
        ids = self._searcher.fast_field_values("doc_id", addresses) if addresses else []
        return {_doc_id(i) for i in ids}

    # -- stored documents ----------------------------------------------------------

    def stored_at(self, address: Any) -> StoredDoc:
        tdoc = self._searcher.doc(address)
        payload = json.loads(bytes(tdoc.get_first("payload") or b"{}").decode("utf-8"))
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
        )

    def stored(self, doc_id: DocId) -> StoredDoc | None:
        """The stored document with this id, or None when this shard lacks it."""
        result = self._searcher.search(self._term("doc_id", int(doc_id)), limit=1, count=False)
        if not result.hits:
            return None
        return self.stored_at(result.hits[0][1])

    def stored_many(self, doc_ids: Sequence[DocId]) -> dict[DocId, StoredDoc]:
        """The stored documents of ``doc_ids`` this shard holds.

        The documents shown on a page are almost always hits of a search this shard just
        answered, whose addresses it remembers: reading them directly skips the doc_id
        search (~0.2 ms a call, a tenth of a BM25 query here). An address is only valid
        for the searcher that returned it, and this shard's searcher never changes.
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
            result = self._searcher.search(self._among(missing), limit=len(missing), count=False)
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
        result = self._searcher.search(self._term("url", url), limit=1, count=False)
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
    return writer.count
