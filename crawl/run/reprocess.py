"""Re-derive documents and link edges from the raw responses a crawl kept, fetching nothing.

The crawler writes every response to WARC (``crawl.run.warc``) before it parses it, so a
change to extraction, dedup or document fields can be applied to an existing crawl:

- :func:`reprocess` runs parse, extract and dedup, as the crawl loop does, on every
  response record of ``DIR/warc`` in the order written, and swaps in new ``DIR/docs`` and
  ``DIR/links`` (``core.atomic``). The crawl database is read, never written: it says which
  canonical targets the crawl knew (in scope).
- :func:`replay` does the same for one URL's latest stored response and returns the
  document it yields, for comparison with the stored one (``trawl replay``).

Bodies are decoded with the crawl's page cap (``crawl.run.warc.read_responses``), so the
parser sees what it saw during the crawl. Revisit records (a recrawl that found the same
payload) add nothing: their payload is the original's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from core.atomic import staging_dir
from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.errors import ConfigError
from core.linkgraph import Edge, LinkGraphStore
from core.settings import CrawlSettings
from core.types import Document
from crawl.extraction.dedup import NearDupIndex, fingerprints
from crawl.extraction.documents import page_document
from crawl.extraction.page import ParsedPage
from crawl.extraction.parsing import PageJob, extract_page
from crawl.fetch.content import parse_content_type
from crawl.run.warc import StoredResponse, read_responses
from crawl.state.sqlite import CrawlDb
from crawl.urls import canonicalize_url

logger = logging.getLogger(__name__)

__all__ = [
    "Derived",
    "ReprocessSummary",
    "StoredResponse",
    "derive",
    "derive_page",
    "page_job",
    "parse_and_fingerprint",
    "replay",
    "reprocess",
    "stored_responses",
]

_BATCH = 500

Fingerprints = tuple[str, int, int]
"""``crawl.extraction.dedup.fingerprints`` of a page's text: content hash, SimHash, word count."""


@dataclass(frozen=True, slots=True)
class Derived:
    """What one stored response yields: a document (or why none) and the page's link edges."""

    url: str
    outcome: str
    """``indexed``, ``duplicate``, ``canonicalized``, ``noindex``, ``not_html``, ``http``."""
    document: Document | None = None
    page: ParsedPage | None = None
    edges: tuple[Edge, ...] = ()
    dup_of: str = ""


@dataclass(slots=True)
class ReprocessSummary:
    responses: int = 0
    documents: int = 0
    edges: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


def stored_responses(data_dir: Path, *, max_bytes: int) -> Iterator[StoredResponse]:
    """Every response record of ``DIR/warc`` (every worker's folder included), bodies decoded."""
    return read_responses(CrawlDir(data_dir).warc, max_bytes=max_bytes)


def derive(
    response: StoredResponse,
    dedup: NearDupIndex,
    settings: CrawlSettings,
    *,
    known_url: Callable[[str], bool],
) -> Derived:
    """Parse, extract and dedup one stored response the way the crawl loop does.

    ``known_url(canonical)`` stands for the crawl's scope: a ``rel=canonical`` target
    the crawl knew makes this page an alias of it.
    """
    job = page_job(response, settings)
    if job is None:
        return Derived(response.url, "http")
    page = extract_page(job)  # in this process: limit_depth bounds what one page can cost
    return derive_page(response, page, dedup, settings, known_url=known_url)


def page_job(response: StoredResponse, settings: CrawlSettings) -> PageJob | None:
    """What parsing ``response`` needs (None for a status other than 200), for this process or a pool."""
    if response.status != 200:
        return None
    media_type, charset = parse_content_type(response.headers.get("content-type", ""))
    return PageJob(
        body=response.body,
        media_type=media_type,
        charset=charset,
        url=response.url,
        x_robots_tag=response.headers.get("x-robots-tag", ""),
        content_language=response.headers.get("content-language", ""),
        max_links=settings.max_links_per_page * 2,
        max_depth=settings.max_html_depth,
    )


def parse_and_fingerprint(job: PageJob) -> tuple[ParsedPage | None, Fingerprints | None]:
    """The page and its text's fingerprints, for a pool worker: hashing the text there keeps
    it off the process that derives in order (an import's serial part)."""
    page = extract_page(job)
    return page, (fingerprints(page.body) if page is not None else None)


def derive_page(
    response: StoredResponse,
    page: ParsedPage | None,
    dedup: NearDupIndex,
    settings: CrawlSettings,
    *,
    known_url: Callable[[str], bool],
    prints: Fingerprints | None = None,
) -> Derived:
    """The rest of :func:`derive` once the page is parsed: canonical, noindex, dedup, document.

    Called in the order responses were written, so dedup keeps the same originals however
    the parsing was spread over processes. ``prints``: the page text's fingerprints when
    they were computed with the parse (:func:`parse_and_fingerprint`)."""
    url = response.url
    if page is None:
        return Derived(url, "not_html")
    followed = [link for link in page.links if not link.nofollow] if not page.nofollow else []
    edges = tuple(Edge(url, link.url, link.anchor_text) for link in followed[: settings.max_links_per_page])
    canonical = page.canonical_url
    if canonical and canonical != url and known_url(canonical):
        return Derived(url, "canonicalized", page=page, edges=edges, dup_of=canonical)
    if page.noindex:
        return Derived(url, "noindex", page=page, edges=edges)
    text_hash, fingerprint, word_count = prints or fingerprints(page.body)
    if word_count:
        verdict = dedup.check(text_hash, fingerprint)
        if verdict.kind != "unique" and verdict.of_url != url:
            return Derived(url, "duplicate", page=page, edges=edges, dup_of=verdict.of_url)
        dedup.add(url, text_hash, fingerprint)
    document = page_document(
        url,
        page,
        fetched_at=response.fetched_at,
        text_hash=text_hash,
        fingerprint=fingerprint,
        max_links=settings.max_links_per_page,
    )
    return Derived(url, "indexed", document=document, page=page, edges=edges)


def reprocess(data_dir: Path, settings: CrawlSettings) -> ReprocessSummary:
    """Rebuild ``DIR/docs`` and ``DIR/links`` from ``DIR/warc``; the old ones are replaced at the end."""
    layout = CrawlDir(data_dir)
    if not layout.exists() or not layout.warc.exists():
        raise ConfigError(f"{data_dir} is not a crawl data directory with raw responses (no warc/).")
    summary = ReprocessSummary()
    dedup = NearDupIndex(settings.near_dup_max_distance)
    db = CrawlDb(layout.db)
    try:
        # The rebuilt documents carry no cluster sizes; "unknown" is safe to say first.
        db.forget_cluster_sizes()
        with staging_dir(layout.docs) as docs_dir, staging_dir(layout.links) as links_dir:
            docs, links = DocStore(docs_dir), LinkGraphStore(links_dir)
            batch_docs: list[Document] = []
            batch_edges: list[Edge] = []
            for response in stored_responses(data_dir, max_bytes=settings.max_page_bytes):
                derived = derive(response, dedup, settings, known_url=lambda u: db.row(u) is not None)
                summary.responses += 1
                summary.outcomes[derived.outcome] = summary.outcomes.get(derived.outcome, 0) + 1
                if derived.document is not None:
                    batch_docs.append(derived.document)
                batch_edges.extend(derived.edges)
                if len(batch_docs) >= _BATCH:
                    docs.append(batch_docs)
                    batch_docs = []
                if len(batch_edges) >= _BATCH * 20:
                    links.append(batch_edges)
                    summary.edges += len(batch_edges)
                    batch_edges = []
            if batch_docs:
                docs.append(batch_docs)
            if batch_edges:
                links.append(batch_edges)
                summary.edges += len(batch_edges)
            summary.documents = len(docs)
    finally:
        db.close()
    logger.info("Reprocessed %d responses into %d documents", summary.responses, summary.documents)
    return summary


def replay(url: str, data_dir: Path, settings: CrawlSettings) -> tuple[Derived | None, Document | None]:
    """The document the latest stored response of ``url`` yields now, and the stored document.

    Dedup here sees only this page (a replay cannot say which earlier page it would
    duplicate); the first element is None when the crawl kept no response for ``url``.
    """
    layout = CrawlDir(data_dir)
    if not layout.exists():
        raise ConfigError(f"{data_dir} is not a crawl data directory (no {layout.db.name} in it).")
    canonical = canonicalize_url(url)
    latest: StoredResponse | None = None
    # The latest by fetch time: worker folders are read one after another.
    for response in stored_responses(data_dir, max_bytes=settings.max_page_bytes):
        if response.url == canonical and (latest is None or response.fetched_at >= latest.fetched_at):
            latest = response
    stored = (
        DocStore(layout.docs).documents_by_url([canonical]).get(canonical) if layout.docs.exists() else None
    )
    if latest is None:
        return None, stored
    db = CrawlDb(layout.db)
    try:
        derived = derive(
            latest,
            NearDupIndex(settings.near_dup_max_distance),
            settings,
            known_url=lambda u: db.row(u) is not None,
        )
    finally:
        db.close()
    return derived, stored
