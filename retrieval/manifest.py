"""Versioned index generations with atomic publish and rollback.

One generation ties together everything a query touches: the shard indexes, the
embedding model that made their vectors, the LTR model and the reranker (its
``manifest.json`` names them). Layout::

    ROOT/generations/<gen>/manifest.json, shard-0000/ …   complete generations only
    ROOT/generations/.building-<gen>/                      in progress (ignored, swept)
    ROOT/CURRENT                                           the serving generation's id
    ROOT/history.jsonl                                     every publish, for rollback

A generation directory appears by ``rename`` only once complete, and ``CURRENT`` is
replaced by ``os.replace`` of a fsynced temporary file, so a crash at any point leaves
the previous generation serving.
"""

from __future__ import annotations

import builtins
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ManifestError
from core.types import Document
from retrieval.build import IndexManifest, build_index

CURRENT = "CURRENT"
GENERATIONS = "generations"


def new_generation_id() -> str:
    return time.strftime("g%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


@dataclass(frozen=True, slots=True)
class GenerationInfo:
    generation: str
    path: Path
    manifest: IndexManifest
    current: bool


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class IndexRoot:
    """A directory of index generations and the pointer to the one that serves."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def generations_dir(self) -> Path:
        return self.root / GENERATIONS

    def current(self) -> str | None:
        try:
            value = (self.root / CURRENT).read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        return value or None

    def path_of(self, generation: str) -> Path:
        if not generation or "/" in generation or generation.startswith("."):
            raise ManifestError(f"{generation!r} is not a generation id; see `trawl index list`.")
        path = self.generations_dir / generation
        if not (path / "manifest.json").exists():
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
            if path.name.startswith(".") or not (path / "manifest.json").exists():
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
        self.generations_dir.mkdir(parents=True, exist_ok=True)
        building = self.generations_dir / f".building-{generation}"
        build_index(
            docs,
            building,
            shards=shards,
            source=source,
            on_progress=on_progress,
            extra={"generation": generation, **(extra or {})},
        )
        building.rename(self.generations_dir / generation)
        return generation

    def publish(self, generation: str) -> None:
        """Make ``generation`` the serving one (atomic pointer swap)."""
        self.path_of(generation)  # validates
        previous = self.current()
        _write_atomically(self.root / CURRENT, generation + "\n")
        with (self.root / "history.jsonl").open("a", encoding="utf-8") as handle:
            handle.write(
                json.dumps({"at": time.time(), "published": generation, "previous": previous}) + "\n"
            )

    def history(self) -> builtins.list[dict[str, Any]]:
        path = self.root / "history.jsonl"
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
        """Remove leftovers of builds that crashed."""
        if self.generations_dir.exists():
            for path in self.generations_dir.glob(".building-*"):
                shutil.rmtree(path, ignore_errors=True)


def resolve_index(path: Path) -> Path:
    """A generation directory from either a generation path or an index root."""
    path = Path(path)
    if (path / "manifest.json").exists():
        return path
    root = IndexRoot(path)
    current = root.current()
    if current is None:
        raise ManifestError(
            f"{path} is not a Trawl index (no manifest.json and no CURRENT generation); build one with "
            "`trawl index --beir DIR --index OUT` or `trawl index --data DIR --index OUT`."
        )
    return root.path_of(current)
