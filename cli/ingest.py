"""``trawl index --warc`` and ``--jsonl``: pages from archives or documents from JSON Lines into
a crawl data directory, reported as a person reads it; the index build follows in ``cli.index``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cli.console import make_console
from core.errors import ConfigError
from core.settings import Settings

if TYPE_CHECKING:
    from crawl.ingest.target import ImportSummary
    from crawl.scope import ScopeMode

console = make_console(stderr=True)

__all__ = ["import_sources"]


def import_sources(
    settings: Settings,
    data: Path,
    *,
    warc: list[str],
    jsonl: list[Path],
    scope: str | None,
    sites: list[str],
    respect_robots: bool,
    on_ray: bool = False,
) -> None:
    """Import ``warc`` archives or ``jsonl`` files into ``data``; prints what became of them.

    ``on_ray``: WARC files are read by one task per file on the connected Ray."""
    if warc:
        _import_warc(settings, data, warc, scope, sites, respect_robots, on_ray)
    else:
        if scope is not None or sites or respect_robots:
            raise typer.BadParameter("--scope, --site and --respect-robots go with --warc, not --jsonl")
        # lazy: the import code loads only for an import; `trawl --help` stays fast
        from crawl.ingest.jsonl_import import import_jsonl

        with console.status("reading JSON Lines…"):
            summary = import_jsonl(jsonl, data)
        console.print(
            f"imported {summary.documents:,} documents from {summary.records:,} lines of "
            f"{summary.files} file(s) into {data} in {summary.seconds:.1f} s",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )


def _import_warc(
    settings: Settings,
    data: Path,
    warc: list[str],
    scope: str | None,
    sites: list[str],
    respect_robots: bool,
    on_ray: bool,
) -> ImportSummary:
    # lazy: warcio and the parser load only for an import; `trawl --help` stays fast
    from crawl.ingest.archive_records import archive_files
    from crawl.ingest.warc_import import import_archives  # lazy: as above
    from crawl.scope import Scope  # lazy: as above

    try:
        files = archive_files(warc)
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from exc
    modes: dict[str, ScopeMode] = {"host": "host", "domain": "domain", "any": "any"}
    mode = modes.get(scope or ("host" if sites else "any"))
    if mode is None:
        raise typer.BadParameter(f"Unknown scope {scope!r}; expected one of: host, domain, any.")
    if mode != "any" and not sites:
        raise typer.BadParameter(f"--scope {mode} needs --site URL (the sites whose pages to keep)")
    keep = Scope.from_seeds(sites, mode=mode, max_depth=10**9) if mode != "any" else None
    if on_ray:
        from crawl.ingest.ray_import import ray_import_archives  # lazy: as above

        with console.status(f"reading {len(files)} archive file(s) on ray, a task per file…"):
            summary = ray_import_archives(
                files, data, settings.crawl, scope=keep, respect_robots=respect_robots
            )
        _report(summary, data)
        return summary
    with console.status(f"reading {len(files)} archive file(s)…") as status:
        summary = import_archives(
            files,
            data,
            settings.crawl,
            scope=keep,
            respect_robots=respect_robots,
            on_progress=lambda s: status.update(
                f"reading archives… {s.records:,} records, {s.outcomes.get('indexed', 0):,} documents"
            ),
        )
    _report(summary, data)
    return summary


def _report(summary: ImportSummary, data: Path) -> None:
    outcomes = ", ".join(f"{n:,} {name}" for name, n in sorted(summary.outcomes.items())) or "none"
    console.print(
        f"imported {summary.records:,} records of {summary.files} file(s) into {data} in "
        f"{summary.seconds:.1f} s: {summary.documents:,} documents, {summary.edges:,} link edges "
        f"(responses: {outcomes}); {len(summary.damaged)} damaged record(s) skipped",
        markup=False,
        highlight=False,
        soft_wrap=True,  # one line a record in a log, whatever the terminal's width
    )
    for damage in summary.damaged:
        console.print(f"damaged: {damage}", markup=False, highlight=False, soft_wrap=True)
