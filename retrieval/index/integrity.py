"""Which files of a generation carry checksums, where their records live, and checking them.

Each record is written by the writer of its part, in that part's manifest, when it
writes the files: the generation manifest (``checksums``) for the generation's own
files, each shard's ``trawl-lexical.json`` (``files``) for its Tantivy segment files and
forward index, each vector index's ``manifest.json`` (``files``) for ``hnsw.bin`` and
``labels.npy``. Not recorded: Tantivy's ``meta.json`` and ``.managed.json`` (rewritten by
every commit and parsed at open), lock files, and state a writer rewrites as it goes
(``incremental.json``, ``updated``, ``vector/CURRENT``, ``passages.npy``, the backfill's
chunks); ``lengths.sqlite`` is checked by SQLite's own ``quick_check``. Tantivy segment
files never change once written, so an in-place update hashes only the new ones.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from core.errors import IndexDamaged, ManifestError
from retrieval.index import layout
from retrieval.index.checksums import ContentMemo, Damage, FileSum, check, from_json, record, to_json
from retrieval.index.manifest import IndexManifest, read_pointer

TANTIVY_SEGMENT_FILE = re.compile(r"^([0-9a-f]{32})\.")
"""``<segment id>.<ext>`` or ``<segment id>.<opstamp>.del``: written once, never changed."""
TANTIVY_OWN = frozenset({"meta.json", ".managed.json"})

Pause = Callable[[], None]


# -- writing records ----------------------------------------------------------------------


def lexical_files(path: Path) -> list[str]:
    """The recorded files of a lexical shard directory, relative to it (forward index included)."""
    path = Path(path)
    manifest = layout.lexical_manifest(path).name
    names = []
    for file in path.rglob("*"):
        name = file.relative_to(path).as_posix()
        if not file.is_file() or name in TANTIVY_OWN or name == manifest or file.name.startswith("."):
            continue
        if file.name.endswith(".tmp"):
            continue  # a writer's temporary (core.atomic), not part of the shard
        names.append(name)
    return names


def lexical_record(
    path: Path, previous: Mapping[str, FileSum] | None = None, *, rewritten: Collection[str] = ()
) -> dict[str, Any]:
    """The ``files`` record of a lexical shard, as JSON. With ``previous`` (an in-place
    update), files it lists that are not ``rewritten`` keep their entry unread."""
    keep = {n: s for n, s in (previous or {}).items() if n not in rewritten}
    return to_json(record(path, lexical_files(path), keep=keep))


# -- checking -------------------------------------------------------------------------------


def _read_json(path: Path) -> dict[str, Any]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    return raw


def live_segments(path: Path) -> set[str] | None:
    """Ids of the segments the shard's current ``meta.json`` names (None: unreadable, every
    recorded file is then checked)."""
    try:
        meta = _read_json(Path(path) / "meta.json")
        return {str(s["segment_id"]).replace("-", "") for s in meta.get("segments", [])}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _lexical_once(
    path: Path, shard: int | None, content: bool, memo: ContentMemo | None, pause: Pause | None
) -> list[Damage]:
    manifest_path = layout.lexical_manifest(path)
    try:
        sums = from_json(_read_json(manifest_path).get("files"))
    except FileNotFoundError:
        return [Damage(manifest_path, "missing", shard, "lexical")]
    except (OSError, ValueError, ManifestError) as exc:
        return [Damage(manifest_path, f"unreadable: {exc}", shard, "lexical")]
    live = live_segments(path)
    # A segment an update merged away is no longer read; one it added is not recorded yet.
    loaded = {
        name: s
        for name, s in sums.items()
        if live is None or (m := TANTIVY_SEGMENT_FILE.match(name)) is None or m.group(1) in live
    }
    return check(path, loaded, content=content, shard=shard, part="lexical", memo=memo, pause=pause)


def _confirmed(run: Callable[[], list[Damage]]) -> list[Damage]:
    """What two checks in a row both find: a writer replacing files mid-check (an in-place
    update's new segments and record) is not damage."""
    first = run()
    if not first:
        return []
    paths = {d.path for d in first}
    return [d for d in run() if d.path in paths]


def check_lexical(
    path: Path,
    *,
    content: bool,
    shard: int | None = None,
    memo: ContentMemo | None = None,
    pause: Pause | None = None,
) -> list[Damage]:
    """Damage in a lexical shard's recorded files ([] for a shard written before checksums)."""
    return _confirmed(lambda: _lexical_once(Path(path), shard, content, memo, pause))


def vector_index_dir(gen_dir: Path, shard: int) -> Path | None:
    """The vector index the shard's ``vector/CURRENT`` names (None: no vectors)."""
    version = read_pointer(layout.vector_pointer(gen_dir, shard))
    if version is None:
        return None
    return layout.vector_index_dir(layout.vector_root(gen_dir, shard) / version)


def check_vectors(
    index_dir: Path,
    *,
    content: bool,
    shard: int | None = None,
    memo: ContentMemo | None = None,
    pause: Pause | None = None,
) -> list[Damage]:
    """Damage in a saved vector index's ``hnsw.bin`` and ``labels.npy``."""
    manifest_path = layout.manifest_file(index_dir)
    try:
        sums = from_json(_read_json(manifest_path).get("files"))
    except FileNotFoundError:
        return [Damage(manifest_path, "missing", shard, "vectors")]
    except (OSError, ValueError, ManifestError) as exc:
        return [Damage(manifest_path, f"unreadable: {exc}", shard, "vectors")]
    return check(index_dir, sums, content=content, shard=shard, part="vectors", memo=memo, pause=pause)


def _sqlite_damage(path: Path, shard: int) -> list[Damage]:
    if not path.exists():
        return []
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            rows = [str(r[0]) for r in db.execute("PRAGMA quick_check")]
        db.close()
    except sqlite3.DatabaseError as exc:
        return [Damage(path, f"SQLite cannot read it: {exc}", shard, "lexical")]
    if rows != ["ok"]:
        return [Damage(path, f"SQLite quick_check: {'; '.join(rows[:3])}", shard, "lexical")]
    return []


def check_generation(
    gen_dir: Path,
    *,
    content: bool,
    memo: ContentMemo | None = None,
    pause: Pause | None = None,
    writer_files: bool = False,
) -> list[Damage]:
    """Damage in every recorded file of a generation: its own, then each shard's lexical
    and vector parts. ``writer_files``: also what only writers read (``lengths.sqlite``)."""
    gen_dir = Path(gen_dir)
    started = time.monotonic()
    try:
        manifest = IndexManifest.load(gen_dir)
    except ManifestError as exc:
        return [Damage(layout.manifest_file(gen_dir), str(exc))]
    damage = check(gen_dir, generation_files(manifest), content=content, memo=memo, pause=pause)
    for shard in range(manifest.shards):
        damage += check_lexical(
            layout.lexical_dir(gen_dir, shard), content=content, shard=shard, memo=memo, pause=pause
        )
        vectors = vector_index_dir(gen_dir, shard)
        if vectors is not None:
            damage += check_vectors(vectors, content=content, shard=shard, memo=memo, pause=pause)
        if writer_files:
            damage += _sqlite_damage(layout.shard_lengths(gen_dir, shard), shard)
    if memo is not None:
        memo.prune(started)
    return damage


def generation_files(manifest: IndexManifest) -> dict[str, FileSum]:
    """The record of the generation's own files (its vocabulary), from its manifest."""
    section = manifest.raw.get("checksums") or {}
    return from_json(section.get("files") if isinstance(section, dict) else section)


def is_checksummed(gen_dir: Path) -> bool:
    """Whether the generation was built with checksums (older ones can only be size-less opened)."""
    try:
        return "checksums" in IndexManifest.load(gen_dir).raw
    except ManifestError:
        return False


def describe(damage: list[Damage], *, limit: int = 5) -> str:
    lines = [str(d) for d in damage[:limit]]
    if len(damage) > limit:
        lines.append(f"… and {len(damage) - limit} more")
    return "; ".join(lines)


def verify_publishable(gen_dir: Path) -> None:
    """Refuse a generation with any damaged file (content hashes read in full)."""
    damage = check_generation(gen_dir, content=True, writer_files=True)
    if damage:
        raise IndexDamaged(
            f"Generation {Path(gen_dir).name} is damaged and was not published: {describe(damage)}. "
            "Rebuild it (`trawl index`), or see every file with `trawl index verify`.",
            tuple(damage),
        )
