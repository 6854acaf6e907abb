"""What a fetched response becomes: a redirect to follow, a sitemap's listing, or a page.

A page is parsed (off the event loop) and its links queued; then ``rel=canonical``,
meta robots ``noindex`` and duplicate detection decide whether its document is
buffered for the next batch (:mod:`crawl.run.batch_writer`). A sitemap lists pages
and child sitemaps. Every path ends in the ``UrlUpdate`` the frontier records.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING

from core.deletions import Removal
from core.linkgraph import Edge
from core.settings import CrawlSettings
from core.types import doc_id_for
from crawl.extraction.dedup import fingerprints
from crawl.extraction.documents import page_document
from crawl.extraction.page import ParsedPage
from crawl.extraction.parsing import PageJob, ParseTimeout
from crawl.extraction.sitemaps import parse_sitemap
from crawl.fetch.fetcher import FetchResult
from crawl.frontier.leases import Lease
from crawl.run.batch_writer import PendingWrites
from crawl.run.counters import CrawlStats
from crawl.run.outcomes import retry_or_fail, scheduled
from crawl.run.parts import CrawlerParts
from crawl.scope import Scope
from crawl.state.content_claims import ContentClaims
from crawl.state.records import NewUrl, Outcome, UrlKind, UrlStatus, UrlUpdate
from crawl.urls import canonicalize_url, host_of

if TYPE_CHECKING:
    from crawl.run.metrics import FetchObserver

_MAX_SITEMAP_DEPTH = 3
_SITEMAP_PRIORITY = 0.9
_SITEMAP_PAGE_PRIORITY = 0.8


class ResponseHandler:
    """Turns each fetched response into its ``UrlUpdate``, queueing what it links to and
    buffering the documents to index (``pending``)."""

    def __init__(
        self,
        parts: CrawlerParts,
        settings: CrawlSettings,
        scope: Scope,
        stats: CrawlStats,
        *,
        claims: ContentClaims,
        pending: PendingWrites,
        observer: FetchObserver | None,
    ) -> None:
        self.settings = settings
        self.scope = scope
        self.stats = stats
        self._frontier = parts.frontier
        self._parser = parts.parser
        self._dedup = parts.dedup
        self._claims = claims
        self._pending = pending
        self._observer = observer

    async def handle(self, lease: Lease, result: FetchResult) -> UrlUpdate:
        url = lease.url
        status = result.status
        now = result.fetched_at or time.time()  # the request's start: what "changed since" compares to
        if status == 429 or status >= 500:
            return retry_or_fail(lease, Outcome.HTTP, status, max_retries=self.settings.max_retries)
        fetched = UrlUpdate(
            url, UrlStatus.DONE, Outcome.NONE, status, fetched=True, last_fetch=now, bytes=len(result.body),
            elapsed_s=result.elapsed_s,
        )  # fmt: skip
        if result.redirect_to:
            target = result.redirect_to
            if self.scope.contains(target, lease.depth) and result.redirects <= self.settings.max_redirects:
                self._add(
                    NewUrl(
                        target, host_of(target), lease.depth, lease.priority, kind=lease.kind, parent=url,
                        redirects=result.redirects,
                    )
                )  # fmt: skip
            return replace(fetched, outcome=Outcome.REDIRECT, dup_of=target)
        if lease.kind == UrlKind.SITEMAP:
            return self._sitemap(lease, result, fetched)
        if status == 304:
            return replace(
                scheduled(fetched, lease, self.settings, changed=False),
                outcome=Outcome.NOT_MODIFIED,
                etag=result.headers.get("etag", lease.etag),
                last_modified=result.headers.get("last-modified", lease.last_modified),
            )
        if status >= 300:
            return replace(scheduled(fetched, lease, self.settings, changed=True), outcome=Outcome.HTTP)
        fetched = replace(
            fetched,
            etag=result.headers.get("etag", ""),
            last_modified=result.headers.get("last-modified", ""),
        )
        job = PageJob(
            body=result.body,
            media_type=result.media_type,
            charset=result.charset,
            url=result.final_url,
            x_robots_tag=result.headers.get("x-robots-tag", ""),
            content_language=result.headers.get("content-language", ""),
            max_links=self.settings.max_links_per_page * 2,
            max_depth=self.settings.max_html_depth,
        )
        try:
            page = await self._parser.extract(job)
        except ParseTimeout as exc:
            self.stats.errors["parse_timeout"] += 1
            return replace(
                fetched, status=UrlStatus.FAILED, outcome=Outcome.PARSE_TIMEOUT, blocked_reason=str(exc)
            )
        if page is None:
            return replace(scheduled(fetched, lease, self.settings, changed=True), outcome=Outcome.NOT_HTML)
        self.stats.pages += 1
        self._follow_links(lease, result.final_url, page)
        if result.final_url != url:
            self._add(
                NewUrl(
                    result.final_url, host_of(result.final_url), lease.depth, lease.priority,
                    status=UrlStatus.DONE, outcome=Outcome.FETCHED_VIA_REDIRECT, dup_of=url,
                )
            )  # fmt: skip
            self._moved(lease, result.final_url, now)
        return self._index_page(lease, result, page, fetched)

    def _moved(self, lease: Lease, final_url: str, now: float) -> None:
        """A page fetched before at ``lease.url`` now redirects within its host (the fetcher
        followed it): the document is indexed at ``final_url``, so the one at the old URL
        goes, as after a redirect that leaves the host (``Outcome.REDIRECT``)."""
        old = doc_id_for(lease.url)
        if lease.fetch_count and lease.kind == UrlKind.PAGE and old != doc_id_for(final_url):
            self._pending.removals.append(Removal(old, lease.url, str(Outcome.REDIRECT), now))

    def _add(self, new: NewUrl) -> None:
        if self._frontier.add(new) and self._observer is not None:
            self._observer.found()

    def _sitemap(self, lease: Lease, result: FetchResult, fetched: UrlUpdate) -> UrlUpdate:
        """List the sitemap's pages and child sitemaps, and schedule its next fetch.

        Every answer, an error too, makes the sitemap due again ``sitemap_refetch_s`` after
        this fetch (``CrawlDb.schedule_recrawl`` makes it pending then), with its validators
        kept for a conditional GET: a changed ``<lastmod>`` is how a listed page becomes due.
        """
        interval = self.settings.sitemap_refetch_s
        fetched = replace(
            fetched,
            next_fetch=(fetched.last_fetch or time.time()) + interval,
            interval_s=interval,
            etag=result.headers.get("etag", lease.etag if result.not_modified else ""),
            last_modified=result.headers.get(
                "last-modified", lease.last_modified if result.not_modified else ""
            ),
        )
        if result.not_modified:
            return replace(fetched, outcome=Outcome.NOT_MODIFIED)
        if result.status >= 300:
            return replace(fetched, outcome=Outcome.HTTP)
        entries = parse_sitemap(result.body, max_bytes=self.settings.max_page_bytes)
        lastmods: dict[str, float] = {}
        now = time.time()
        for page in entries.pages:
            target = canonicalize_url(page, base=lease.url)
            if target and self.scope.contains(target, 1):
                when = entries.lastmod.get(page)
                if when is not None:
                    lastmods[target] = when = min(when, now)  # a future date would keep it due forever
                self._add(
                    NewUrl(target, host_of(target), 1, _SITEMAP_PAGE_PRIORITY, parent=lease.url, lastmod=when)
                )
        self._pending.lastmods.update(lastmods)  # for URLs known already; a new one's NewUrl carries it
        for child in entries.sitemaps:
            self.add_sitemap(child, lease.depth + 1, parent=lease.url)
        return replace(fetched, outcome=Outcome.SITEMAP)

    def add_sitemap(self, sitemap_url: str, depth: int, *, parent: str) -> None:
        target = canonicalize_url(sitemap_url, base=parent)
        if not target or depth > _MAX_SITEMAP_DEPTH or self.scope.out_of_scope_reason(target, 0):
            return
        self._frontier.add(
            NewUrl(target, host_of(target), depth, _SITEMAP_PRIORITY, kind=UrlKind.SITEMAP, parent=parent)
        )

    def _follow_links(self, lease: Lease, page_url: str, page: ParsedPage) -> None:
        if page.nofollow:
            return
        depth = lease.depth + 1
        priority = 1.0 / (1.0 + depth)
        taken = 0
        frontier = self._frontier
        for link in page.links:
            if link.nofollow:
                continue
            if taken >= self.settings.max_links_per_page:
                break
            taken += 1
            self._pending.edges.append(Edge(page_url, link.url, link.anchor_text))
            if not frontier.surely_seen(link.url) and self.scope.contains(link.url, depth):
                self._add(NewUrl(link.url, host_of(link.url), depth, priority, parent=page_url))

    def _index_page(
        self, lease: Lease, result: FetchResult, page: ParsedPage, fetched: UrlUpdate
    ) -> UrlUpdate:
        """Apply canonical, noindex and dedup; buffer the document when it is to be indexed."""
        url = lease.url
        final = result.final_url
        canonical = page.canonical_url
        if canonical and canonical != final and self.scope.contains(canonical, lease.depth):
            self._add(NewUrl(canonical, host_of(canonical), lease.depth, lease.priority, parent=url))
            rescheduled = scheduled(fetched, lease, self.settings, changed=True)
            return replace(rescheduled, outcome=Outcome.CANONICALIZED, dup_of=canonical)
        if page.noindex:
            return replace(scheduled(fetched, lease, self.settings, changed=True), outcome=Outcome.NOINDEX)
        text_hash, fingerprint, word_count = fingerprints(page.body)
        changed = text_hash != lease.previous_hash
        fetched = replace(
            scheduled(fetched, lease, self.settings, changed=changed),
            content_hash=text_hash,
            simhash=fingerprint,
        )
        held = not word_count  # whether this very text is indexed under this URL already
        if word_count:
            verdict = self._dedup.check(text_hash, fingerprint)
            original = self._claims.original_of(verdict.of_url)
            if verdict.kind != "unique" and original not in (url, final):
                self.stats.duplicates += 1
                return replace(fetched, outcome=Outcome.DUPLICATE, detail=verdict.kind, dup_of=original)
            # Unchanged text that is not indexed (last time a copy of a page that has
            # since changed) is indexed again, or the page would stay out of search.
            held = verdict.kind == "exact"
            self._dedup.add(url, text_hash, fingerprint)
        if lease.fetch_count and not changed and held:
            return replace(fetched, outcome=Outcome.INDEXED)  # a recrawl that found the same text
        self._pending.doc_leases.append(lease)
        self._pending.docs.append(
            page_document(
                final,
                page,
                fetched_at=result.fetched_at,
                text_hash=text_hash,
                fingerprint=fingerprint,
                max_links=self.settings.max_links_per_page,
            )
        )
        self.stats.indexed += 1
        return replace(fetched, outcome=Outcome.INDEXED, changed=bool(lease.fetch_count) and changed)
