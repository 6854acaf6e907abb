"""Per-document field lengths of one shard, kept beside its Tantivy index.

Ballast (``retrieval.index.collection_stats``) needs each shard's document count and tokens per text
field. A build knows them from its writers; after in-place updates (add, replace,
delete) the totals must still be exact, so every real document's tokens per field are
kept here, keyed by doc id, and the totals are sums. Writes are upserts and deletes,
so applying the same update twice (a replay after a crash) leaves the same rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from retrieval.index.lexical_schema import LENGTH_FIELDS

__all__ = ["ShardLengths", "ShardTotals"]

_COLUMNS = ", ".join(LENGTH_FIELDS)


@dataclass(frozen=True, slots=True)
class ShardTotals:
    docs: int
    field_tokens: dict[str, int]
    nonempty_fields: dict[str, int]


class ShardLengths:
    """The lengths table of one shard (SQLite; one writer, the indexer)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._conn = sqlite3.connect(self.path)
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS lengths (doc_id INTEGER PRIMARY KEY, "
            f"{', '.join(f'{f} INTEGER NOT NULL' for f in LENGTH_FIELDS)})"
        )

    def apply(self, put: Iterable[tuple[int, Mapping[str, int]]], delete: Iterable[int] = ()) -> None:
        """Upsert ``put`` and delete ``delete`` in one transaction."""
        with self._conn:
            self._conn.executemany("DELETE FROM lengths WHERE doc_id = ?", [(int(d),) for d in delete])
            self._conn.executemany(
                f"INSERT OR REPLACE INTO lengths (doc_id, {_COLUMNS}) "
                f"VALUES (?, {', '.join('?' for _ in LENGTH_FIELDS)})",
                [(int(d), *(int(t.get(f, 0)) for f in LENGTH_FIELDS)) for d, t in put],
            )

    def totals(self) -> ShardTotals:
        sums = ", ".join(f"COALESCE(SUM({f}), 0)" for f in LENGTH_FIELDS)
        nonempty = ", ".join(f"COALESCE(SUM({f} > 0), 0)" for f in LENGTH_FIELDS)
        row = self._conn.execute(f"SELECT COUNT(*), {sums}, {nonempty} FROM lengths").fetchone()
        n = len(LENGTH_FIELDS)
        return ShardTotals(
            int(row[0]),
            dict(zip(LENGTH_FIELDS, map(int, row[1 : 1 + n]), strict=True)),
            dict(zip(LENGTH_FIELDS, map(int, row[1 + n :]), strict=True)),
        )

    def close(self) -> None:
        self._conn.close()
