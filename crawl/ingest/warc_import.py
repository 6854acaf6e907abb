"""WARC and ARC archives from any crawler into a crawl data directory, fetching nothing.

Each HTML response goes through what a crawled page goes through: the body decoded as the
fetch path decodes it (chunking undone, Content-Encoding with the page cap, charset
sniffed by the parser), then ``crawl.run.reprocess.derive`` (extraction,
canonicalisation, exact and near-duplicate detection, link edges). The result is
``DIR/docs`` and ``DIR/links``, which ``trawl index --data DIR`` builds from.

Two passes over the archives keep memory bounded by the number of records, not their
bytes: the first notes which URLs the archives hold (a ``rel=canonical`` target counts
only when archived, as a crawl counts only targets it knew), the robots.txt responses, and
where each payload lies (a revisit of another URL reads its original again by offset);
the second derives the documents.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from core.atomic import staging_dir
from core.docstore import DocStore
from core.linkgraph import Edge, LinkGraphStore
from core.settings import CrawlSettings
from core.types import Document
from crawl.extraction.dedup import NearDupIndex
from crawl.extraction.page import ParsedPage
from crawl.extraction.parsing import PageJob, ParsePool, ParseTimeout, extract_page
from crawl.fetch.content import parse_content_type
from crawl.fetch.decoding import DecodedTooLarge
from crawl.fetch.robots import RobotsPolicy, agent_token
from crawl.ingest.archive_records import http_status, read_records, record_at
from crawl.ingest.survey import Survey, origin, payload_body, robots_policies, survey_archives
from crawl.ingest.target import ImportSummary, import_target
from crawl.run.reprocess import Derived, Fingerprints, derive_page, page_job, parse_and_fingerprint
from crawl.run.warc import StoredResponse, warc_time
from crawl.scope import Scope
from crawl.urls import canonicalize_url

if TYPE_CHECKING:
    from warcio.recordloader import ArcWarcRecord

logger = logging.getLogger(__name__)

__all__ = ["DocSink", "PageReader", "import_archives"]

_BATCH = 500
_AHEAD = 8
"""Pages read ahead per parse worker: a slow page at the head then stalls neither worker."""
_WARM_BYTES = 32 << 20
"""Archives from which the parse workers start with the first pass (a small import may need none)."""
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml", ""})


def import_archives(
    files: list[Path],
    data_dir: Path,
    settings: CrawlSettings,
    *,
    scope: Scope | None = None,
    respect_robots: bool = False,
    on_progress: Callable[[ImportSummary], None] | None = None,
    workers: int | None = None,
) -> ImportSummary:
    """Derive ``data_dir``'s documents and link graph from ``files``; both are replaced at the end.

    Pages are parsed by a pool of ``workers`` processes (None: ``crawl.parse_workers``, whose
    0 is one per core), as the crawl's are; dedup and writing stay in this process, in the
    archives' order.

    ``scope`` keeps only the URLs it contains (None: every URL); ``respect_robots`` drops
    pages the archived robots.txt of their origin disallows for ``settings.user_agent``
    (an origin without one in the archives is allowed).
    """
    started = time.perf_counter()
    summary = ImportSummary(files=len(files))
    with import_target(data_dir) as layout:
        pool = ParsePool(
            settings.parse_workers if workers is None else workers, timeout_s=settings.parse_timeout_s
        )
        try:
            if sum(path.stat().st_size for path in files) >= _WARM_BYTES:
                pool.start()  # the workers start up while the first pass reads
            survey = survey_archives(files, settings.max_page_bytes)
            robots = robots_policies(survey.robots) if respect_robots else {}
            reader = PageReader(files, survey, settings, scope, robots, summary)
            with staging_dir(layout.docs) as docs_dir, staging_dir(layout.links) as links_dir:
                sink = DocSink(DocStore(docs_dir), LinkGraphStore(links_dir), summary, on_progress)
                asyncio.run(_derive_all(files, reader, pool, sink))
                sink.flush()
                summary.documents = len(sink.docs)
        finally:
            pool.close()
        summary.seconds = time.perf_counter() - started
        summary.record(layout)
    logger.info(
        "Imported %d records of %d files into %d documents (%d damaged)",
        summary.records, summary.files, summary.documents, len(summary.damaged),
    )  # fmt: skip
    return summary


@dataclass(frozen=True, slots=True)
class _Pending:
    """A response whose page a pool worker parses; derived when its turn comes."""

    response: StoredResponse
    job: PageJob


_Parsed = tuple[ParsedPage | None, Fingerprints | None]


async def _derive_all(files: list[Path], reader: PageReader, pool: ParsePool, sink: DocSink) -> None:
    """Every record through the reader, pages parsed ``_AHEAD × workers`` ahead, results in order.

    The loop runs after every record and while a batch is written, so a worker that is done
    gets its next page then, not only when the oldest page is awaited."""
    window = _AHEAD * pool.workers
    queue: deque[tuple[Derived | _Pending, asyncio.Future[_Parsed] | None]] = deque()
    for index, path in enumerate(files):
        for item in read_records(path, partial(reader.derive, index), sink.summary.damaged.append):
            if item is None:
                continue
            task = (
                asyncio.ensure_future(pool.run(parse_and_fingerprint, item.job))
                if isinstance(item, _Pending)
                else None
            )
            queue.append((item, task))
            await asyncio.sleep(0)
            while len(queue) > window or (queue and (queue[0][1] is None or queue[0][1].done())):
                await _take(sink, await reader.finish(*queue.popleft()))
    while queue:
        await _take(sink, await reader.finish(*queue.popleft()))


async def _take(sink: DocSink, derived: Derived) -> None:
    """``sink.add`` with a full batch written in a thread: the loop meanwhile hands workers pages."""
    if sink.collect(derived):
        await asyncio.to_thread(sink.write_full)


class DocSink:
    """Derived pages into the docstore and link graph, in batches."""

    def __init__(
        self,
        docs: DocStore,
        links: LinkGraphStore,
        summary: ImportSummary,
        on_progress: Callable[[ImportSummary], None] | None,
    ) -> None:
        self.docs, self.links, self.summary = docs, links, summary
        self._on_progress = on_progress
        self._batch: list[Document] = []
        self._edges: list[Edge] = []

    def add(self, derived: Derived) -> None:
        if self.collect(derived):
            self.write_full()

    def collect(self, derived: Derived) -> bool:
        """Take ``derived`` in; True when a batch is full, for :meth:`write_full` (a thread may run it)."""
        self.summary.count(derived.outcome)
        if derived.document is not None:
            self._batch.append(derived.document)
        self._edges.extend(derived.edges)
        return len(self._batch) >= _BATCH or len(self._edges) >= _BATCH * 20

    def write_full(self) -> None:
        """The full batches written (a segment's Parquet encoding and fsyncs)."""
        if len(self._batch) >= _BATCH:
            self.docs.append(self._batch)
            self._batch = []
            if self._on_progress is not None:
                self._on_progress(self.summary)
        if len(self._edges) >= _BATCH * 20:
            self._flush_edges()

    def _flush_edges(self) -> None:
        self.links.append(self._edges)
        self.summary.edges += len(self._edges)
        self._edges = []

    def flush(self) -> None:
        if self._batch:
            self.docs.append(self._batch)
            self._batch = []
        if self._edges:
            self._flush_edges()


class PageReader:
    """The second pass: one record at a time to what the crawl loop would have stored."""

    def __init__(
        self,
        files: list[Path],
        survey: Survey,
        settings: CrawlSettings,
        scope: Scope | None,
        robots: dict[str, RobotsPolicy],
        summary: ImportSummary,
    ) -> None:
        self._files = files
        self._survey = survey
        self._settings = settings
        self._scope = scope
        self._robots = robots
        self._agent = agent_token(settings.user_agent)
        self._summary = summary
        self._dedup = NearDupIndex(settings.near_dup_max_distance)

    async def finish(self, item: Derived | _Pending, task: asyncio.Future[_Parsed] | None) -> Derived:
        """A pending page's parse awaited and derived (dedup in archive order); others as they are."""
        if not isinstance(item, _Pending):
            return item
        assert task is not None
        try:
            page, prints = await task
        except ParseTimeout:
            return Derived(item.response.url, "parse_timeout")
        return derive_page(
            item.response,
            page,
            self._dedup,
            self._settings,
            known_url=self._survey.urls.__contains__,
            prints=prints,
        )

    def derive_here(self, index: int, offset: int, record: ArcWarcRecord) -> Derived | None:
        """:meth:`derive` with the page parsed in this process (a Ray task is one core already)."""
        item = self.derive(index, offset, record)
        if not isinstance(item, _Pending):
            return item
        page = extract_page(item.job)
        return derive_page(
            item.response, page, self._dedup, self._settings, known_url=self._survey.urls.__contains__
        )

    def derive(self, index: int, offset: int, record: ArcWarcRecord) -> Derived | _Pending | None:
        self._summary.records += 1
        kind = record.rec_type
        if kind not in ("response", "revisit"):
            return None
        status = http_status(record)  # raises for a block that only claims to be HTTP: damage
        url = canonicalize_url(record.rec_headers.get_header("WARC-Target-URI") or "")
        if not url or (status is None and kind == "response"):
            return Derived(url, "not_http")
        self._summary.responses += 1
        if urlsplit(url).path == "/robots.txt":
            return Derived(url, "robots_txt")
        if self._scope is not None and not self._scope.contains(url):
            return Derived(url, "out_of_scope")
        policy = self._robots.get(origin(url))
        if policy is not None and not policy.can_fetch(url, self._agent):
            return Derived(url, "robots")
        headers = {k.lower(): v for k, v in record.http_headers.headers} if record.http_headers else {}
        if kind == "revisit":
            body = self._original_body(url, record)
            if body is None:
                return Derived(url, "revisit")
        else:
            media_type, _ = parse_content_type(headers.get("content-type", ""))
            if status != 200:
                return Derived(url, "http")
            if media_type not in _HTML_TYPES:
                return Derived(url, "not_html")
            try:
                body = payload_body(record, max_bytes=self._settings.max_page_bytes)
            except DecodedTooLarge:
                return Derived(url, "too_large")
            if body is None:
                return Derived(url, "undecodable")
        for name in ("content-encoding", "content-length", "transfer-encoding"):
            headers.pop(name, None)
        fetched_at = warc_time(record.rec_headers.get_header("WARC-Date"))
        response = StoredResponse(url, 200 if kind == "revisit" else status or 0, headers, body, fetched_at)
        job = page_job(response, self._settings)
        return Derived(url, "http") if job is None else _Pending(response, job)

    def _original_body(self, url: str, record: ArcWarcRecord) -> bytes | None:
        """A revisit's payload, read from its original; None when the original is this URL's own
        (already derived) or not in the archives."""
        refers_to = canonicalize_url(record.rec_headers.get_header("WARC-Refers-To-Target-URI") or "")
        if refers_to == url or (not refers_to and url in self._survey.urls):
            return None
        where = self._survey.payloads.get(record.rec_headers.get_header("WARC-Payload-Digest") or "")
        if where is None:
            return None
        index, offset = where
        return record_at(
            self._files[index],
            offset,
            lambda original: payload_body(original, max_bytes=self._settings.max_page_bytes, cap_ok=True),
        )
