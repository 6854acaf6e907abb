"""An index root: its generations, the pointer to the serving one, publish and rollback.

A generation directory appears by ``rename`` only once complete (staged under a hidden
name beside its place; hidden names are leftovers swept by the next build), and
``CURRENT`` is replaced atomically and durably (:func:`core.atomic.write_text`), so a
crash at any point leaves the previous generation serving.
"""

from __future__ import annotations

import builtins
import json
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.atomic import write_text
from core.errors import ManifestError
from core.types import Document
from retrieval.index import layout
from retrieval.index.build import build_index
from retrieval.index.manifest import IndexManifest, is_generation_id, new_generation_id, read_pointer


@dataclass(frozen=True, slots=True)
class GenerationInfo:
    generation: str
    path: Path
    manifest: IndexManifest
    current: bool


class IndexRoot:
    """A directory of index generations and the pointer to the one that serves."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

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
        """Make ``generation`` the serving one (atomic pointer swap)."""
        self.path_of(generation)  # validates
        previous = self.current()
        write_text(layout.current_pointer(self.root), generation + "\n")
        with layout.history_file(self.root).open("a", encoding="utf-8") as handle:
            handle.write(
                json.dumps({"at": time.time(), "published": generation, "previous": previous}) + "\n"
            )

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

    def rollback(self) -> str:
        """Publish the generation that served before the current one; returns it."""
        current = self.current()
        for entry in reversed(self.history()):
            if entry.get("published") == current and entry.get("previous"):
                previous = str(entry["previous"])
                self.publish(previous)
                return previous
        raise ManifestError(f"Nothing to roll back to in {self.root}: no earlier published generation.")

    def sweep(self) -> None:
        """Remove leftovers of builds that crashed (hidden names: staged or replaced trees)."""
        if self.generations_dir.exists():
            for path in self.generations_dir.glob(".*"):
                shutil.rmtree(path, ignore_errors=True)


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
