"""Which generations of an index root stay, and removing the rest (``trawl index gc``).

Kept: the serving generation; the ``keep`` that served most recently before it (what
rollback returns to, :meth:`IndexRoot.served`); generations never served that were built
after the serving one (a ``--no-publish`` build waiting for its publish); and any that a
process has open (``retrieval.index.pins``: a serving process keeps open the generations
its live cursors name). Everything else goes, then what dead builds left and the stored
vectors only removed generations used. ``trawl run`` collects after every compaction.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from core.atomic import fsync_dir, temp_sibling
from retrieval.index import layout
from retrieval.index.pins import pinned_files, unpinned
from retrieval.index.root import IndexRoot, disk_bytes
from retrieval.vectors.backfill import collect_garbage

__all__ = ["GcReport", "Removed", "collect", "retained"]

logger = logging.getLogger(__name__)

SERVING = "serving"
HISTORY = "rollback history"
UNPUBLISHED = "built after the serving one, not yet published"
PINNED = "open in a serving process (a live cursor may name it)"


@dataclass(frozen=True, slots=True)
class Removed:
    name: str
    bytes: int
    why: str


@dataclass(slots=True)
class GcReport:
    removed: list[Removed] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    """Generation → why it stays."""
    vector_bytes: int = 0
    """Freed in the vector store (vectors no kept generation uses)."""

    @property
    def freed(self) -> int:
        return sum(r.bytes for r in self.removed) + self.vector_bytes

    def summary(self) -> str:
        generations = sum(1 for r in self.removed if not r.name.startswith("."))
        return (
            f"removed {generations} generation(s) and {len(self.removed) - generations} leftover(s), "
            f"freed {human_bytes(self.freed)} ({self.vector_bytes:,} bytes of it stored vectors); "
            f"kept {len(self.kept)}"
        )


def human_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GiB"


def retained(root: IndexRoot, keep: int) -> dict[str, str]:
    """The generations that stay whatever processes have open, each with why."""
    infos = {g.generation: g for g in root.list()}
    served = root.served()
    if not served:  # nothing serves yet: nothing is old
        return dict.fromkeys(infos, UNPUBLISHED)
    out = {served[0]: SERVING}
    history = 0
    for generation in served[1:]:
        if history >= keep:
            break
        if generation not in out and generation in infos:
            out[generation] = HISTORY
            history += 1
    serving = infos.get(served[0])
    since = serving.manifest.built_at if serving is not None else float("inf")
    for generation, info in infos.items():
        if generation not in served and info.manifest.built_at > since:
            out.setdefault(generation, UNPUBLISHED)
    return out


def collect(root: IndexRoot, keep: int) -> GcReport:
    """Remove every generation :func:`retained` does not keep and no process has open."""
    report = GcReport()
    with root.writing():
        for path, size in root.sweep():
            report.removed.append(Removed(path.name, size, "left by a build that died"))
        report.kept = retained(root, keep)
        for info in root.list():
            if info.generation in report.kept:
                continue
            with unpinned(root.root, info.generation) as free:
                if not free:
                    report.kept[info.generation] = PINNED
                    continue
                report.removed.append(Removed(info.generation, _remove(info.path), f"beyond the {keep} kept"))
                layout.pin_file(root.root, info.generation).unlink(missing_ok=True)
        _forget_stale_pins(root)
        if any(not r.name.startswith(".") for r in report.removed):
            report.vector_bytes = _collect_vectors(root)
    if report.removed:
        logger.info("index root %s: %s", root.root, report.summary())
    return report


def _remove(path: Path) -> int:
    """Move a generation out of sight (one rename: readers see it or nothing), then delete it."""
    hidden = temp_sibling(path)  # a crash mid-delete leaves a leftover the next sweep takes
    os.replace(path, hidden)
    fsync_dir(hidden.parent)
    size = disk_bytes(hidden)
    shutil.rmtree(hidden, ignore_errors=True)
    return size


def _forget_stale_pins(root: IndexRoot) -> None:
    """Pin files of generations gone (a reader that lost the race with a removal made one)."""
    for path in pinned_files(root.root):
        if not layout.generation_dir(root.root, path.name).exists():
            with unpinned(root.root, path.name) as free:
                if free:
                    path.unlink(missing_ok=True)


def _collect_vectors(root: IndexRoot) -> int:
    stores = layout.vector_stores_dir(root.root)
    if not stores.is_dir():
        return 0
    before = disk_bytes(stores)
    collect_garbage(root.root)
    return max(0, before - disk_bytes(stores))
