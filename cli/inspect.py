"""``trawl inspect``: what the crawl knows about one URL, and whether the serving index holds it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from cli.console import make_console
from core.blocklist import BlockList
from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.settings import SearchSettings, Settings
from core.types import Document
from crawl.run.inspect import inspect_url
from crawl.state.readable import STATE_LABELS, readable

if TYPE_CHECKING:
    from retrieval.index.page_quality import PageQuality

_SHOWN_ELSEWHERE = frozenset({"url", "canonical_url", "doc_id", "robots", "indexed", "dup_of", "cluster"})


def inspect_command(
    url: Annotated[str, typer.Argument(help="The URL to explain.")],
    data: Annotated[Path, typer.Option("--data", help="Crawl data directory.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    index: Annotated[
        Path | None, typer.Option("--index", help="Index root: also say whether and where it is indexed.")
    ] = None,
) -> None:
    """Explain what the crawl knows about one URL.

    Its canonical form, the robots.txt decision, its crawl state and fetch history, its
    duplicates, and (with --index) whether it is in the serving generation and in which shard.

    Example: trawl inspect "http://127.0.0.1:8099/library/os.html?utm_source=x" --data data/demo/crawl
    """
    crawl = Settings().crawl
    CrawlDir(data).require_crawl(crawl.frontier_url)
    # A fleet's state is in its PostgreSQL frontier (TRAWL_CRAWL__FRONTIER_URL), not in DIR.
    report = inspect_url(url, data, user_agent=crawl.user_agent, frontier_url=crawl.frontier_url)
    indexed = _indexed(report.canonical_url, index) if index is not None and report.canonical_url else None
    rule = BlockList(CrawlDir(data).blocklist).match(report.canonical_url) if report.canonical_url else None
    blocked = rule.describe() if rule is not None else None
    freshness = (
        _freshness(report.canonical_url, index) if index is not None and report.canonical_url else None
    )
    stored = _stored_document(report.canonical_url, data) if report.canonical_url else None
    lang = stored.lang if stored is not None else None
    quality = _quality(stored) if stored is not None else None
    if json_out:
        payload = {
            "indexed": indexed,
            "lang": lang,
            "quality": None
            if quality is None
            else {
                "score": quality.score,
                "link_density": quality.link_density,
                "reasons": list(quality.reasons),
            },  # fmt: skip
            "blocked": blocked,
            "freshness": freshness,
            "url": report.url,
            "canonical_url": report.canonical_url,
            "doc_id": report.doc_id,
            "robots": report.robots,
            "state": report.state,
            "history": list(report.history),
            "dup_of": report.dup_of,
            "cluster": list(report.cluster),
        }
        typer.echo(json.dumps(payload, default=str))
        return
    out = make_console()
    if not report.canonical_url:
        out.print(f"[red]{url!r} is not a crawlable http(s) URL.")
        raise typer.Exit(1)
    table = Table(title=f"Inspect {report.canonical_url}", show_header=False)
    table.add_row(STATE_LABELS["canonical_url"], report.canonical_url)
    table.add_row(STATE_LABELS["doc_id"], str(report.doc_id))
    table.add_row(STATE_LABELS["robots"], report.robots)
    if report.state is None:
        table.add_row(STATE_LABELS["status"], "never seen by this crawl")
    else:
        for key in STATE_LABELS:
            if key in _SHOWN_ELSEWHERE or report.state.get(key) in (None, "", 0):
                continue
            text = readable(key, report.state[key])
            if text:
                table.add_row(STATE_LABELS[key], text)
    if lang is not None:
        table.add_row("Language", lang or "none (not declared, too little text to identify)")
    if quality is not None:
        table.add_row("Page quality", _described(quality))
    if blocked is not None:
        table.add_row("Block list", blocked)
    if indexed is not None:
        table.add_row(STATE_LABELS["indexed"], indexed)
    for key, value in (freshness or {}).items():
        text = readable(key, value)
        if text:
            table.add_row(f"Freshness: {key.replace('_', ' ')}", text)
    if report.dup_of:
        table.add_row(STATE_LABELS["dup_of"], report.dup_of)
    if report.cluster:
        table.add_row(STATE_LABELS["cluster"], "\n".join(report.cluster))
    for entry in report.history:
        table.add_row(
            "Fetched",
            f"{readable('at', entry['at'])}: HTTP {entry['http_status']}, {entry['outcome']} "
            f"({readable('bytes', entry['bytes'])}, {readable('elapsed_s', entry['elapsed_s'])})",
        )
    out.print(table)


def _stored_document(canonical_url: str, data: Path) -> Document | None:
    """The URL's latest stored document: its language (declared by the page or its
    Content-Language header, else identified from its text) and its quality; None when none."""
    docs = CrawlDir(data).docs
    if not docs.exists():
        return None
    return DocStore(docs).documents_by_url([canonical_url]).get(canonical_url)


def _quality(doc: Document) -> PageQuality:
    """The static quality the index gives the page (``retrieval.index.page_quality``)."""
    # lazy: crawl workers import this module, and no retrieval code (tests/unit/cli/test_crawl_imports.py)
    from retrieval.index.page_quality import quality_of

    return quality_of(doc)


def _described(quality: PageQuality) -> str:
    # lazy: crawl workers import this module, and no retrieval code (tests/unit/cli/test_crawl_imports.py)
    from retrieval.index.page_quality import describe

    return describe(quality.score, quality.reasons)


def _freshness(canonical_url: str, index: Path) -> dict[str, object] | None:
    """Where the URL is on the way from fetch to search (the incremental indexer's log)."""
    from dataclasses import asdict

    # lazy: crawl workers import this module, and no retrieval code (tests/unit/cli/test_crawl_imports.py)
    from retrieval.index.freshness import FreshnessLog
    from retrieval.index.layout import freshness_file  # lazy: as above

    if not freshness_file(index).exists():
        return None
    log = FreshnessLog(index)
    try:
        found = log.lookup(canonical_url)
    finally:
        log.close()
    return asdict(found) if found is not None else None


def _indexed(canonical_url: str, index: Path) -> str:
    """Whether the serving generation of ``index`` holds the URL, and where."""
    # lazy: loads tantivy and hnswlib; `trawl --help` stays fast
    from retrieval.query.service import SearchService

    service = SearchService.open(index, SearchSettings(use_vectors=False, cache_entries=0))
    try:
        located = service.locate_url(canonical_url)
        generation = service.generation.id
    finally:
        service.close()
    if located is None:
        return f"no (generation {generation})"
    return f"yes: doc {int(located[0])}, shard {located[1]}, generation {generation}"
