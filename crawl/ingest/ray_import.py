"""``trawl index --warc … --engine ray``: one Ray task per archive file, merged as a fleet's crawl is.

The survey runs as one task per file and is merged here in file order. Then each file's
task derives its pages with its own dedup and writes its own worker folders
(``docs/w-NNNNN``, ``links/w-NNNNN``: the fleet's layout, read in folder order); it
returns the fingerprints of what it kept. Duplicates *across* files are decided here, in
file order, with the same near-duplicate index as a one-process import, and recorded as
removals (``core.deletions``), as a fleet's content claims are: the index then serves
what the local import would. Files and the data directory must be visible to every node.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from core.atomic import staging_dir
from core.crawldir import worker_folder
from core.deletions import DeletionLog, Removal
from core.docstore import DocStore
from core.jobs import import_ray
from core.linkgraph import LinkGraphStore
from core.settings import CrawlSettings
from core.types import DocId
from crawl.extraction.dedup import NearDupIndex
from crawl.ingest.archive_records import read_records
from crawl.ingest.survey import Survey, robots_policies, survey_file
from crawl.ingest.target import ImportSummary, import_target
from crawl.ingest.warc_import import DocSink, PageReader
from crawl.scope import Scope

logger = logging.getLogger(__name__)

__all__ = ["ray_import_archives"]


@dataclass(frozen=True, slots=True)
class _Kept:
    """A document a file's task stored: what the cross-file dedup needs."""

    doc_id: DocId
    url: str
    content_hash: str
    simhash: int


def _survey_task(index: int, path: str, max_bytes: int) -> Survey:
    return survey_file(index, Path(path), max_bytes)


def _derive_task(
    index: int,
    files: list[str],
    survey: Survey,
    settings: CrawlSettings,
    scope: Scope | None,
    respect_robots: bool,
    docs_dir: str,
    links_dir: str,
) -> tuple[ImportSummary, list[_Kept]]:
    paths = [Path(f) for f in files]
    summary = ImportSummary(files=1)
    robots = robots_policies(survey.robots) if respect_robots else {}
    reader = PageReader(paths, survey, settings, scope, robots, summary)
    folder = worker_folder(f"{index:05d}")
    sink = DocSink(
        DocStore(Path(docs_dir), worker=folder), LinkGraphStore(Path(links_dir), worker=folder), summary, None
    )
    kept: list[_Kept] = []
    for derived in read_records(
        paths[index], lambda o, r: reader.derive_here(index, o, r), summary.damaged.append
    ):
        if derived is None:
            continue
        sink.add(derived)
        if (doc := derived.document) is not None:
            kept.append(_Kept(doc.doc_id, doc.url, doc.content_hash, doc.simhash))
    sink.flush()
    return summary, kept


def ray_import_archives(
    files: list[Path],
    data_dir: Path,
    settings: CrawlSettings,
    *,
    scope: Scope | None = None,
    respect_robots: bool = False,
) -> ImportSummary:
    """:func:`crawl.ingest.warc_import.import_archives` on the connected Ray, a task per file."""
    ray = import_ray()
    started = time.perf_counter()
    names = [str(f.resolve()) for f in files]
    summary = ImportSummary(files=len(files))
    with import_target(data_dir) as layout:
        survey_remote = ray.remote(num_cpus=1, max_retries=0)(_survey_task)
        survey = Survey()
        for part in ray.get(
            [survey_remote.remote(i, n, settings.max_page_bytes) for i, n in enumerate(names)]
        ):
            survey.merge(part)
        survey_ref = ray.put(survey)
        derive_remote = ray.remote(num_cpus=1, max_retries=0)(_derive_task)
        with staging_dir(layout.docs) as docs_dir, staging_dir(layout.links) as links_dir:
            results = ray.get(
                [
                    derive_remote.remote(
                        i, names, survey_ref, settings, scope, respect_robots, str(docs_dir), str(links_dir)
                    )
                    for i in range(len(names))
                ]
            )
            removals = _cross_file_duplicates([kept for _, kept in results], settings)
            for part, _ in results:
                _add(summary, part)
            summary.documents = len(DocStore(docs_dir)) - len(removals)
        DeletionLog(layout.deletions).record(removals)  # after the swap: the new docs/ is in place
        summary.seconds = time.perf_counter() - started
        summary.record(layout)
    return summary


def _cross_file_duplicates(per_file: list[list[_Kept]], settings: CrawlSettings) -> list[Removal]:
    """Documents that duplicate one kept before them, in file order, as removals: what a
    one-process import, reading the files in this order, would not have stored."""
    dedup = NearDupIndex(settings.near_dup_max_distance)
    at = time.time()
    removals: list[Removal] = []
    for kept in per_file:
        for doc in kept:
            verdict = dedup.check(doc.content_hash, doc.simhash)
            if verdict.kind != "unique" and verdict.of_url != doc.url:
                removals.append(Removal(doc.doc_id, doc.url, f"duplicate of {verdict.of_url}", at))
            else:
                dedup.add(doc.url, doc.content_hash, doc.simhash)
    return removals


def _add(total: ImportSummary, part: ImportSummary) -> None:
    total.records += part.records
    total.responses += part.responses
    total.edges += part.edges
    total.damaged.extend(part.damaged)
    for outcome, count in part.outcomes.items():
        total.outcomes[outcome] = total.outcomes.get(outcome, 0) + count
