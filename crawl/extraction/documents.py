"""The document a parsed page becomes: one definition for the crawl loop and for reprocessing.

``trawl reprocess`` and ``trawl replay`` must yield exactly what a crawl stores, so
both build the stored :class:`~core.types.Document` here. The host is kept without
its port (``127.0.0.1``, as ``site:`` matches it) except for IPv6 literals; followed
links become the outlinks, at most ``max_links``.
"""

from __future__ import annotations

from core.types import Document, doc_id_for
from crawl.extraction.page import ParsedPage
from crawl.urls import host_of

__all__ = ["page_document"]


def page_document(
    url: str, page: ParsedPage, *, fetched_at: float, text_hash: str, fingerprint: int, max_links: int
) -> Document:
    """The stored document of ``page``, fetched (after redirects) from ``url``."""
    host = host_of(url)
    return Document(
        doc_id=doc_id_for(url),
        url=url,
        title=page.title,
        body=page.body,
        headings=page.headings,
        host=host if host.endswith("]") else host.rsplit(":", 1)[0],
        lang=page.lang,
        filetype="html",
        description=page.description,
        published_at=page.published_at if page.published_at is not None else page.modified_at,
        fetched_at=fetched_at,
        content_hash=text_hash,
        simhash=fingerprint,
        outlinks=tuple(link.url for link in page.links if not link.nofollow)[:max_links],
        alternates=tuple(url for _, url in page.alternates),
        sections=page.sections,
        link_words=page.link_words,
    )
