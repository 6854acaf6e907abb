"""Sizes and content hashes of index files: recorded by whoever writes the files, checked
before anything reads them.

Why: a garbled index file used to be served silently (a ``.term`` file: other rankings)
or to take the process down (hnswlib segfaults on a garbled ``hnsw.bin``). A writer
records each file it wrote (:func:`record`) in the manifest of the part it wrote
(:mod:`retrieval.index.integrity` says which); a reader compares. Checking sizes costs a
``stat`` per file, so it runs at every open; checking content reads every byte, so it runs
at publish, on demand and in a serving process's background, and before hnswlib loads a
file. A :class:`ContentMemo` spares re-reading files whose ``stat`` did not change.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ManifestError

ALGORITHM = "blake2b"
"""The content hash: BLAKE2b with a 32-byte digest, read in :data:`CHUNK_BYTES` pieces."""
CHUNK_BYTES = 1 << 20
MEMO_TRUST_S = 86_400.0
"""How long a file found intact is trusted while its ``stat`` stays the same: damage that
leaves size and times alone (a failing disk) is found within this long."""


@dataclass(frozen=True, slots=True)
class FileSum:
    """A file's size in bytes and its content hash (hex)."""

    size: int
    digest: str

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, ALGORITHM: self.digest}

    @classmethod
    def from_json(cls, raw: Any) -> FileSum:
        if not isinstance(raw, dict) or not isinstance(raw.get(ALGORITHM), str):
            raise ManifestError(f"a checksum entry {raw!r} has no {ALGORITHM} digest")
        return cls(int(raw["size"]), str(raw[ALGORITHM]))


@dataclass(frozen=True, slots=True)
class Damage:
    """A file that does not match its record, and what was found."""

    path: Path
    problem: str
    shard: int | None = None
    """The shard whose part holds the file (None: the generation's own files)."""
    part: str = "generation"
    """``lexical`` (Tantivy and forward files: the shard is dropped), ``vectors`` (the shard
    serves lexical only) or ``generation``."""

    def __str__(self) -> str:
        where = f"shard {self.shard} {self.part}: " if self.shard is not None else ""
        return f"{where}{self.path}: {self.problem}"


def digest_file(path: Path, *, pause: Callable[[], None] | None = None) -> str:
    """The content hash of ``path``, streamed; ``pause`` is called between pieces (a
    background check gives way to requests there)."""
    h = hashlib.blake2b(digest_size=32)
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            h.update(chunk)
            if pause is not None:
                pause()
    return h.hexdigest()


def record(
    directory: Path, names: Iterable[str], *, keep: Mapping[str, FileSum] | None = None
) -> dict[str, FileSum]:
    """Size and hash of each of ``names`` (relative to ``directory``).

    ``keep``: entries taken as they are, unread: files the writer did not rewrite (an
    in-place update adds a Tantivy segment; the others are never rewritten, and reading
    them again would cost the whole shard per update).
    """
    directory = Path(directory)
    out: dict[str, FileSum] = {}
    for name in sorted(names):
        known = (keep or {}).get(name)
        if known is not None:
            out[name] = known
        else:
            path = directory / name
            out[name] = FileSum(path.stat().st_size, digest_file(path))
    return out


def to_json(sums: Mapping[str, FileSum]) -> dict[str, Any]:
    return {name: s.to_json() for name, s in sorted(sums.items())}


def from_json(raw: Any) -> dict[str, FileSum]:
    """The record a manifest holds ({} when it holds none: written before checksums)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ManifestError(f"a checksum record is {type(raw).__name__}, not an object")
    try:
        return {str(name): FileSum.from_json(entry) for name, entry in raw.items()}
    except (TypeError, ValueError, KeyError) as exc:
        raise ManifestError(f"a checksum record is not valid: {exc}") from exc


class ContentMemo:
    """Files whose content matched their record, by path: not read again while their
    record, size, modification time and inode stay the same (for :data:`MEMO_TRUST_S`).

    Garbling a file in place changes its modification time, so a serving process can
    check often and read only what changed. Not thread-safe: one checker owns it.
    """

    def __init__(self, trust_s: float = MEMO_TRUST_S) -> None:
        self.trust_s = trust_s
        self._seen: dict[Path, tuple[tuple[str, int, int, int], float]] = {}
        self._touched: dict[Path, float] = {}

    @staticmethod
    def _key(expected: FileSum, stat: os.stat_result) -> tuple[str, int, int, int]:
        return (expected.digest, stat.st_size, stat.st_mtime_ns, stat.st_ino)

    def known(self, path: Path, expected: FileSum, stat: os.stat_result) -> bool:
        now = time.monotonic()
        self._touched[path] = now
        seen = self._seen.get(path)
        return seen is not None and seen[0] == self._key(expected, stat) and now - seen[1] < self.trust_s

    def remember(self, path: Path, expected: FileSum, stat: os.stat_result) -> None:
        self._seen[path] = (self._key(expected, stat), time.monotonic())

    def forget(self, path: Path) -> None:
        self._seen.pop(path, None)

    def prune(self, before: float) -> None:
        """Forget files no check asked about since ``before`` (segments merged away, an
        older generation): a process that follows updates for days stays small."""
        for path in [p for p, at in self._touched.items() if at < before]:
            self._touched.pop(path, None)
            self._seen.pop(path, None)


def check(
    directory: Path,
    sums: Mapping[str, FileSum],
    *,
    content: bool,
    shard: int | None = None,
    part: str = "generation",
    memo: ContentMemo | None = None,
    pause: Callable[[], None] | None = None,
) -> list[Damage]:
    """The files of ``sums`` under ``directory`` that are missing, of another size, or
    (with ``content``) of other content than recorded."""
    directory = Path(directory)
    damage: list[Damage] = []

    def found(path: Path, problem: str) -> None:
        damage.append(Damage(path, problem, shard, part))

    for name, expected in sorted(sums.items()):
        path = directory / name
        try:
            stat = path.stat()
        except FileNotFoundError:
            found(path, "missing")
            continue
        except OSError as exc:
            found(path, f"cannot be read: {exc.strerror or exc}")
            continue
        if stat.st_size != expected.size:
            found(path, f"{stat.st_size} bytes, recorded {expected.size} (truncated or overwritten)")
            continue
        if not content or (memo is not None and memo.known(path, expected, stat)):
            continue
        try:
            digest = digest_file(path, pause=pause)
        except OSError as exc:
            found(path, f"cannot be read: {exc.strerror or exc}")
            continue
        if digest != expected.digest:
            found(path, f"content differs from its recorded {ALGORITHM} checksum (garbled)")
            if memo is not None:
                memo.forget(path)
        elif memo is not None:
            memo.remember(path, expected, stat)
    return damage
