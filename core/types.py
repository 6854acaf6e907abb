"""Domain types shared by every package.

They live in ``core`` so that ``crawl``, ``retrieval``, ``rerank``, ``training`` and
``api`` can all speak the same language without importing each other. They are
frozen, slotted dataclasses: cheap, hashable and typed. Pydantic only appears at the
edges (settings and API schemas).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, NewType
from urllib.parse import quote

DocId = NewType("DocId", int)
"""A 63-bit hash of the canonical URL (or of a BEIR ``_id``): positive, so it is a
valid hnswlib label and a Tantivy u64 fast field as well."""


FRAGMENT_SAFE = "!$&'()*+,;=:@/?-._~"
"""What a URL fragment may hold unescaped (RFC 3986 ``pchar``, ``/`` and ``?``): an id such as
``collections.defaultdict`` stays as written, a space or ``#`` is escaped."""


def url_at(url: str, anchor: str) -> str:
    """``url`` opened at the element with id ``anchor`` (``url`` itself when ``anchor`` is empty).

    >>> url_at("https://docs.python.org/3/library/functions.html", "zip")
    'https://docs.python.org/3/library/functions.html#zip'
    """
    return f"{url}#{quote(anchor, safe=FRAGMENT_SAFE)}" if anchor else url


def doc_id_for(key: str) -> DocId:
    """Stable 63-bit id for a canonical URL or external id.

    >>> doc_id_for("https://example.org/") == doc_id_for("https://example.org/")
    True
    """
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return DocId(int.from_bytes(digest, "big") & ((1 << 63) - 1))


@dataclass(frozen=True, slots=True)
class Section:
    """A part of a page, from a heading (or an API entry's ``<dt id>``) to the next one."""

    heading: str
    anchor: str
    """The id a link can name (``page#anchor``); ``""`` when the page gives the heading none."""
    start: int
    """Where the section begins in the document's body, in characters: at its heading's text."""
    end: int
    """Where the next section begins, or the body's length."""


@dataclass(frozen=True, slots=True)
class Document:
    """One parsed, cleaned page (or one corpus record) as stored in the docstore."""

    doc_id: DocId
    url: str
    title: str
    body: str
    headings: tuple[str, ...] = ()
    anchors: tuple[str, ...] = ()
    """Anchor texts of links *pointing to* this page (filled by the link-graph job)."""
    host: str = ""
    lang: str = ""
    filetype: str = "html"
    description: str = ""
    external_id: str = ""
    """The id the document had in its source collection (BEIR ``_id``); empty for crawled pages."""
    published_at: float | None = None
    """Unix seconds, when the page declares it."""
    fetched_at: float | None = None
    content_hash: str = ""
    simhash: int = 0
    pagerank: float = 0.0
    dup_cluster_size: int = 1
    outlinks: tuple[str, ...] = ()
    alternates: tuple[str, ...] = ()
    """URLs the page names as its translations (``<link rel=alternate hreflang>``); the index
    groups translations by them (``retrieval.index.translations``)."""
    sections: tuple[Section, ...] = ()
    """The page's sections in order (``crawl.extraction.sections``); results link to the one that
    answers the query (``retrieval.query.sections``)."""
    link_words: int = 0
    """Words of ``body`` inside links: how much of the page is an index or a listing
    (``retrieval.index.page_quality``); 0 for documents not crawled."""


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed user query. Built by :func:`retrieval.text.analyzer.parse_query`."""

    raw: str
    terms: tuple[str, ...] = ()
    phrases: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    site: str | None = None
    lang: str | None = None
    filetype: str | None = None
    expansions: tuple[tuple[str, float], ...] = ()
    """Query-time synonyms of the free terms: (text, weight relative to the term's own)."""
    truncated: str = ""
    """What was cut from an over-long query, in words for the person who typed it ("" when nothing)."""
    read_as: str = ""
    """The language whose function words the query's free words are read with
    (``retrieval.text.function_words``); "" for English and languages without a list."""

    @property
    def is_empty(self) -> bool:
        """True when nothing positive is asked for (exclusions alone match nothing)."""
        return not self.terms and not self.phrases

    @property
    def positive_text(self) -> str:
        """Free terms and phrase words as one string: what an embedder should see."""
        return " ".join((*self.terms, *self.phrases))


@dataclass(frozen=True, slots=True)
class ScoredDoc:
    """A document id with one score from one retriever."""

    doc_id: DocId
    score: float


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked result, ready for presentation."""

    doc_id: DocId
    url: str
    title: str
    snippet: str
    """HTML-escaped text with matched terms wrapped in ``<mark>…</mark>``."""
    score: float
    external_id: str = ""
    explain: dict[str, Any] | None = None
    """Why this result ranks where it does (only when asked for)."""
    similar: int = 0
    """Near-identical results (same SimHash cluster) folded into this one on its page."""
    lang: str = ""
    translation_group: str = ""
    """The index's key for the page's translations (``""``: none): hits sharing it are one page
    in several languages, shown once (``retrieval.query.translations``)."""
    translations: tuple[tuple[str, str], ...] = ()
    """``(lang, url)`` of the same page's other languages among the results, folded into this one."""
    section: Section | None = None
    """The part of the page that answers the query, when one does clearly better than its top:
    the snippet is quoted from it and :attr:`link` opens it."""

    @property
    def link(self) -> str:
        """The URL to open: :attr:`url`, at the section's anchor when there is one."""
        return url_at(self.url, self.section.anchor) if self.section is not None else self.url


@dataclass(frozen=True, slots=True)
class SearchResponse:
    """What a search returns, before it is turned into JSON or HTML."""

    query: Query
    total: int
    page: int
    size: int
    hits: tuple[Hit, ...]
    took_ms: float
    ranker: str = "bm25"
    generation: str = ""
    partial: bool = False
    missing_shards: tuple[int, ...] = ()
    missing_vector_shards: tuple[int, ...] = ()
    hedged_shards: tuple[int, ...] = ()
    next_cursor: str | None = None
    cached: bool = False
    timings_ms: dict[str, float] = field(default_factory=dict)
    suggestion: str | None = None
    """A spelling correction of the query to offer ("Did you mean …?")."""
    rewritten_from: str | None = None
    """The query as typed, when these are the results of its spelling correction instead."""
    ignored_words: tuple[str, ...] = ()
    """Very common words (``the``, ``of``, ``is``, …) of a query too long for them to be
    searched (more than four words: a sentence, whose stopwords are grammar); a ranker with
    vectors still reads the whole query. A short query searches its stopwords in titles and
    headings (``retrieval.text.stopword_search``), so "if statement" is not "statement"."""
