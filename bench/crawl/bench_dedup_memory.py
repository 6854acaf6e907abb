"""Memory of the near-duplicate index a crawl worker holds for the whole crawl's originals.

    .venv/bin/python bench/crawl/bench_dedup_memory.py [--documents 100000]

Every worker rebuilds ``crawl.extraction.dedup.NearDupIndex`` from the crawl database on start, so
its bytes per document bound how large a crawl one worker can join. Measured with
tracemalloc (Python allocations; URL and hash strings are made before tracing, as the
database rows hand them over, so the previous layout's hex-string keys cost it nothing
here while the new layout's 16-byte keys count) against the layout it replaced, a dict of
``(fingerprint, url)`` tuple lists per block with text-hash keys, run beside it; lookup
time over the same probes is reported as a ratio.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from crawl.extraction.dedup import NearDupIndex, hamming  # noqa: E402


class DictOfTuplesIndex:
    """The previous layout (until 2026-12-01), kept here as the peer."""

    def __init__(self, max_distance: int = 3) -> None:
        self._max_distance = max_distance
        self._by_hash: dict[str, str] = {}
        self._blocks: list[dict[int, list[tuple[int, str]]]] = [{} for _ in range(4)]

    def add(self, url: str, text_hash: str, fingerprint: int) -> None:
        self._by_hash.setdefault(text_hash, url)
        for block, table in enumerate(self._blocks):
            table.setdefault((fingerprint >> (block * 16)) & 0xFFFF, []).append((fingerprint, url))

    def check(self, text_hash: str, fingerprint: int) -> tuple[str, str]:
        if text_hash in self._by_hash:
            return "exact", self._by_hash[text_hash]
        best: tuple[int, str] | None = None
        for block, table in enumerate(self._blocks):
            for other, url in table.get((fingerprint >> (block * 16)) & 0xFFFF, ()):
                distance = hamming(fingerprint, other)
                if distance <= self._max_distance and (best is None or distance < best[0]):
                    best = (distance, url)
        return ("near", best[1]) if best else ("unique", "")


def _measure(factory: type, rows: list[tuple[str, str, int]], probes: list[int]) -> tuple[float, float, list]:
    tracemalloc.start()
    index = factory(3)
    for url, text_hash, fingerprint in rows:
        index.add(url, text_hash, fingerprint)
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    started = time.process_time()
    verdicts = [index.check("0" * 32, probe) for probe in probes]
    lookup_s = time.process_time() - started
    return used / len(rows), lookup_s, verdicts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--documents", type=int, default=100_000)
    parser.add_argument("--probes", type=int, default=20_000)
    args = parser.parse_args()
    rng = random.Random(0)
    # Text hashes as the crawl database returns them: 32 hex characters, new strings per row.
    rows = [
        (
            f"http://host{i % 200}.example/section/page-{i}.html",
            f"{rng.getrandbits(128):032x}",
            rng.getrandbits(64),
        )
        for i in range(args.documents)
    ]
    probes = [rows[rng.randrange(len(rows))][2] ^ (1 << rng.randrange(64)) for _ in range(args.probes // 2)]
    probes += [rng.getrandbits(64) for _ in range(args.probes - len(probes))]
    old_bytes, old_s, old_verdicts = _measure(DictOfTuplesIndex, rows, probes)
    new_bytes, new_s, new_verdicts = _measure(NearDupIndex, rows, probes)
    same = all((o[0], o[1]) == (n.kind, n.of_url) for o, n in zip(old_verdicts, new_verdicts, strict=True))
    print(f"{args.documents:,} documents, {len(probes):,} probes (half within one bit of a document)")
    print(f"previous layout: {old_bytes:.0f} bytes/document, lookups {old_s * 1e6 / len(probes):.1f} µs")
    print(f"NearDupIndex:    {new_bytes:.0f} bytes/document, lookups {new_s * 1e6 / len(probes):.1f} µs")
    print(
        f"memory {new_bytes / old_bytes:.2f}× the previous layout, lookup time {new_s / old_s:.2f}×; "
        f"verdicts equal: {same}"
    )


if __name__ == "__main__":
    main()
