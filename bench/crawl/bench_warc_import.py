"""WARC import speed and memory: ``trawl index --warc``'s import against bare warcio + selectolax.

    .venv/bin/python bench/crawl/bench_warc_import.py [--size-mb 1024] [--gzip]

Builds a synthetic archive from the demo site's pages (Debian's python3.11-doc): each page
copied under one host per copy, with every copy's common words changed ("the" → "the3") so
the copies are neither exact nor near duplicates of each other and every page is indexed,
as in an archive of many different sites. Then, in one run, on the same file:

- the peer: warcio's ArchiveIterator over the file, each HTML response's body read
  (``content_stream``) and parsed by selectolax (lexbor), its title and text taken;
- Trawl: ``crawl.ingest.warc_import.import_archives`` in a child process (both passes,
  extraction in its parse pool of one process per core, dedup, link edges, docstore and
  link-graph writes), its peak RSS read from the kernel (``VmHWM``), and the largest parse
  worker's (``RUSAGE_CHILDREN``).

Reports pages/s of each, their ratio (goal ≥ 0.5×) and Trawl's peak RSS (goal ≤ 300 MB);
the latest run goes first in bench/results/warc-import.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.results_file import record_run  # noqa: E402

DEMO = Path("/usr/share/doc/python3.11/html")
RESULTS = Path(__file__).resolve().parents[1] / "results" / "warc-import.md"
_COMMON = (b" the ", b" a ", b" of ", b" to ", b" is ", b" and ", b" in ")
_CHILD = """
import json, resource, sys, time
from pathlib import Path
from core.settings import CrawlSettings
from crawl.ingest.warc_import import import_archives
started = time.perf_counter()
summary = import_archives([Path(sys.argv[1])], Path(sys.argv[2]), CrawlSettings())
seconds = time.perf_counter() - started
status = Path("/proc/self/status").read_text()
peak_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
worker_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_mb": peak_kb / 1024, "worker_peak_mb": worker_kb / 1024,
                  "summary": summary.as_json()}))
"""


def build_archive(path: Path, size_mb: int, gzipped: bool) -> int:
    """A WARC of about ``size_mb`` MB of distinct HTML responses; returns how many it holds."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    pages = sorted(DEMO.rglob("*.html"))
    sources = [(p.relative_to(DEMO).as_posix(), p.read_bytes()) for p in pages]
    count, copy = 0, 0
    with path.open("wb") as out:
        writer = WARCWriter(out, gzip=gzipped)
        while out.tell() < size_mb * 1024 * 1024:
            for name, body in sources:
                for word in _COMMON:
                    body = body.replace(word, word[:-1] + str(copy).encode() + b" ")
                http = StatusAndHeaders(
                    "200 OK",
                    [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(body)))],
                    protocol="HTTP/1.1",
                )
                url = f"http://copy{copy}.example/{name}"
                record = writer.create_warc_record(
                    url, "response", payload=io.BytesIO(body), http_headers=http
                )
                writer.write_record(record)
                count += 1
                if out.tell() >= size_mb * 1024 * 1024:
                    break
            copy += 1
    return count


def bare_peer(path: Path) -> tuple[int, float]:
    """warcio iteration + selectolax parsing (title and text) of every HTML response."""
    from selectolax.lexbor import LexborHTMLParser
    from warcio.archiveiterator import ArchiveIterator

    pages, chars = 0, 0
    started = time.perf_counter()
    with path.open("rb") as stream:
        for record in ArchiveIterator(stream):
            if record.rec_type != "response" or record.http_headers is None:
                continue
            if "html" not in (record.http_headers.get_header("Content-Type") or ""):
                continue
            tree = LexborHTMLParser(record.content_stream().read())
            title = tree.css_first("title")
            chars += len(title.text() if title is not None else "") + len(
                tree.body.text() if tree.body else ""
            )
            pages += 1
    return pages, time.perf_counter() - started


def trawl_import(path: Path, into: Path) -> dict[str, object]:
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(into)],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    data: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="Archive size to build (MB).")
    parser.add_argument("--gzip", action="store_true", help="Gzip per record (.warc.gz) instead of plain.")
    parser.add_argument("--no-record", action="store_true", help="Print only; leave the results file.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-warc-") as tmp:
        archive = Path(tmp) / ("synthetic.warc.gz" if args.gzip else "synthetic.warc")
        started = time.perf_counter()
        records = build_archive(archive, args.size_mb, args.gzip)
        size_mb = archive.stat().st_size / 1024 / 1024
        took = time.perf_counter() - started
        print(f"built {archive.name}: {records:,} responses, {size_mb:,.0f} MB in {took:.0f} s")
        peer_pages, peer_s = bare_peer(archive)
        peer_rate = peer_pages / peer_s
        print(f"bare warcio + selectolax: {peer_pages:,} pages in {peer_s:.1f} s ({peer_rate:,.1f} pages/s)")
        run = trawl_import(archive, Path(tmp) / "imported")
        summary = run["summary"]
        assert isinstance(summary, dict)
        seconds = float(run["seconds"])  # type: ignore[arg-type]
        peak = float(run["peak_mb"])  # type: ignore[arg-type]
        worker_peak = float(run["worker_peak_mb"])  # type: ignore[arg-type]
        pages = int(summary["responses"])
        ratio = (pages / seconds) / (peer_pages / peer_s)
        print(
            f"trawl import: {pages:,} pages in {seconds:.1f} s ({pages / seconds:,.1f} pages/s), "
            f"{summary['documents']:,} documents, peak RSS {peak:,.0f} MB "
            f"(each parse worker ≤ {worker_peak:,.0f} MB); "
            f"{ratio:.2f}x the bare peer's pages/s"
        )
    if args.no_record:
        return
    body = (
        f"Command: `.venv/bin/python bench/crawl/bench_warc_import.py --size-mb {args.size_mb}"
        f"{' --gzip' if args.gzip else ''}`; {platform.node()}, {os.cpu_count()} cores.\n\n"
        f"Archive: {archive.name}, {size_mb:,.0f} MB, {records:,} HTML responses of distinct pages "
        f"(the demo site's 530 pages, copied with their common words changed per copy).\n\n"
        "| reader | pages | seconds | pages/s | ratio | peak RSS |\n|---|---|---|---|---|---|\n"
        f"| bare warcio + selectolax (title and text) | {peer_pages:,} | {peer_s:.1f} | "
        f"{peer_pages / peer_s:,.1f} | 1.00× | |\n"
        f"| Trawl `import_archives` (2 passes, extraction, dedup, links, docstore) | {pages:,} | "
        f"{seconds:.1f} | {pages / seconds:,.1f} | **{ratio:.2f}×** (goal ≥ 0.5×) | "
        f"**{peak:,.0f} MB** (goal ≤ 300 MB), each parse worker ≤ {worker_peak:,.0f} MB |\n\n"
        f"Outcomes: {json.dumps(summary['outcomes'])}; {summary['documents']:,} documents, "
        f"{summary['edges']:,} link edges, {len(summary['damaged'])} damaged records.\n"
    )
    record_run(
        RESULTS,
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        body,
        intro="# WARC import: speed and memory\n\nMade by `bench/crawl/bench_warc_import.py`.",
    )
    print(f"recorded in {RESULTS}")


if __name__ == "__main__":
    main()
