"""An index root: its generations, the pointer to the serving one, publish and rollback.

A generation directory appears by ``rename`` only once complete (staged under a hidden
name beside its place that carries the builder's pid; a dead builder's leftovers are swept
by the next writer), and ``CURRENT`` is replaced atomically and durably
(:func:`core.atomic.write_text`), so a crash at any point leaves the previous generation
serving. A publish appends its history entry before it moves the pointer, so the entry of
the serving generation is always there for rollback (:meth:`IndexRoot.served`). Every
writer holds the root's lock (:meth:`IndexRoot.writing`): one at a time.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.atomic import fsync_dir, write_text
from core.dirlock import DirLock
from core.errors import ManifestError
from core.types import Document
from retrieval.index import layout
from retrieval.index.build import build_index
from retrieval.index.integrity import verify_publishable
from retrieval.index.manifest import IndexManifest, is_generation_id, new_generation_id, read_pointer

_STAGED = re.compile(r"\.(\d+)-[0-9a-f]+\.tmp$")
"""The tail of a name made by ``core.atomic.temp_sibling``: the pid of the process that made it."""


@dataclass(frozen=True, slots=True)
class GenerationInfo:
    generation: str
    path: Path
    manifest: IndexManifest
    current: bool


class IndexRoot:
    """A directory of index generations and the pointer to the one that serves."""

    def __init__(self, root: Path, *, lock_wait_s: float = 0.0) -> None:
        """``lock_wait_s``: how long a writer method waits for another writer of the root."""
        self.root = Path(root)
        self.lock_wait_s = lock_wait_s

    def writing(self, *, wait_s: float | None = None) -> contextlib.AbstractContextManager[DirLock]:
        """Hold the root's writer lock (re-entrant in this thread): raises ``DirectoryBusy``
        naming the holder when another writer keeps it past ``wait_s`` (default
        ``lock_wait_s``). Build, publish, rollback, sweep and gc take it themselves; hold
        it around several of them (build then publish) to keep others out in between."""
        lock = DirLock(layout.lock_file(self.root), what=f"Index root {self.root}")
        return lock.held(wait_s=self.lock_wait_s if wait_s is None else wait_s)

    @property
    def generations_dir(self) -> Path:
        return layout.generations_dir(self.root)

    def current(self) -> str | None:
        return read_pointer(layout.current_pointer(self.root))

    def path_of(self, generation: str) -> Path:
        if not is_generation_id(generation):
            raise ManifestError(f"{generation!r} is not a generation id; see `trawl index list`.")
        path = layout.generation_dir(self.root, generation)
        if not layout.is_index(path):
            raise ManifestError(
                f"Generation {generation!r} does not exist in {self.root}; see `trawl index list`."
            )
        return path

    def list(self) -> builtins.list[GenerationInfo]:
        if not self.generations_dir.exists():
            return []
        current = self.current()
        out = []
        for path in sorted(self.generations_dir.iterdir()):
            if path.name.startswith(".") or not layout.is_index(path):
                continue
            out.append(GenerationInfo(path.name, path, IndexManifest.load(path), path.name == current))
        return out

    def build(
        self,
        docs: Iterable[Document],
        *,
        shards: int = 1,
        source: str = "",
        extra: dict[str, Any] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> str:
        """Build a new generation (not yet serving); returns its id."""
        with self.writing():
            self.sweep()
            generation = new_generation_id()
            build_index(
                docs,
                layout.generation_dir(self.root, generation),
                shards=shards,
                source=source,
                on_progress=on_progress,
                extra={"generation": generation, **(extra or {})},
            )
        return generation

    def publish(self, generation: str) -> None:
        """Make ``generation`` the serving one (atomic pointer swap).

        The history entry is made durable first, then the pointer: a crash between the two
        leaves an entry whose generation never became the pointer, which :meth:`served`
        skips; the other order lost the serving generation's entry, and with it rollback.
        """
        with self.writing():
            verify_publishable(self.path_of(generation))  # every file's size and hash: damage never serves
            previous = self.current()
            self._append_history({"at": time.time(), "published": generation, "previous": previous})
            write_text(layout.current_pointer(self.root), generation + "\n")

    def _append_history(self, entry: dict[str, Any]) -> None:
        path = layout.history_file(self.root)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            torn = False
            if os.fstat(fd).st_size > 0:
                with path.open("rb") as handle:
                    handle.seek(-1, os.SEEK_END)
                    torn = handle.read(1) != b"\n"
            # A line torn by a crash mid-append is ended first, or this entry would join it.
            os.write(fd, (b"\n" if torn else b"") + (json.dumps(entry) + "\n").encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(path.parent)

    def history(self) -> builtins.list[dict[str, Any]]:
        path = layout.history_file(self.root)
        if not path.exists():
            return []
        entries = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line from a crash mid-append
        return entries

    def served(self) -> builtins.list[str]:
        """The generations that served, newest first, from the current one back.

        Read as a chain: the last entry that published the current generation names the
        one before it, the last earlier entry that published that one names the one before,
        and so on. An entry whose pointer write never happened (a crash between the two
        writes of :meth:`publish`) is on no chain. A generation serves more than once after
        a rollback, and is listed each time.
        """
        current = self.current()
        if current is None:
            return []
        entries = self.history()
        chain, wanted, end = [current], current, len(entries)
        while True:
            at = next((i for i in range(end - 1, -1, -1) if entries[i].get("published") == wanted), None)
            previous = entries[at].get("previous") if at is not None else None
            if at is None or not isinstance(previous, str) or not previous:
                return chain
            chain.append(previous)
            wanted, end = previous, at

    def rollback(self) -> str:
        """Publish the generation that served before the current one; returns it.

        That is the newest one on :meth:`served`'s chain that is still on disk; when the
        history has no entry for the serving generation (a root whose publish crashed
        before history came first), the newest generation on disk built before it.
        """
        with self.writing():
            current = self.current()
            on_disk = {g.generation: g for g in self.list()}
            earlier = [g for g in self.served()[1:] if g != current and g in on_disk]
            if current in on_disk and not any(e.get("published") == current for e in self.history()):
                built = on_disk[current].manifest.built_at
                older = sorted(
                    (g for g in on_disk.values() if g.manifest.built_at < built),
                    key=lambda g: g.manifest.built_at,
                )
                earlier = [g.generation for g in reversed(older)]
            if not earlier:
                raise ManifestError(
                    f"Nothing to roll back to in {self.root}: no earlier published generation."
                )
            self.publish(earlier[0])
            return earlier[0]

    def sweep(self) -> builtins.list[tuple[Path, int]]:
        """Remove what dead builds left (hidden names under ``generations/``); returns each with
        the bytes it held.

        Never a live build's staging folder: under the lock no other writer runs, and a name
        made by ``core.atomic.temp_sibling`` carries its maker's pid, left alone while that
        process lives on this host (a builder that took no lock).
        """
        removed: builtins.list[tuple[Path, int]] = []
        with self.writing():
            if not self.generations_dir.exists():
                return removed
            for path in sorted(self.generations_dir.glob(".*")):
                match = _STAGED.search(path.name)
                if match and _alive(int(match.group(1))):
                    continue
                size = disk_bytes(path)
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
                removed.append((path, size))
        return removed


def _alive(pid: int) -> bool:
    """Whether a process with this pid runs on this host (this one counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def disk_bytes(path: Path) -> int:
    """Bytes removing ``path`` frees: files hard-linked from elsewhere (a derived generation
    shares its source's lexical files) free nothing until their last link goes."""
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                stat = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.st_nlink <= 1:
                total += stat.st_size
    return total


def resolve_index(path: Path) -> Path:
    """A generation directory from either a generation path or an index root."""
    path = Path(path)
    if layout.is_index(path):
        return path
    root = IndexRoot(path)
    current = root.current()
    if current is None:
        raise ManifestError(
            f"{path} is not a Trawl index (no {layout.MANIFEST} and no {layout.CURRENT} generation); "
            "build one with "
            "`trawl index --beir DIR --index OUT` or `trawl index --data DIR --index OUT`."
        )
    return root.path_of(current)
