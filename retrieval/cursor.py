"""Opaque deep-paging cursors pinned to a generation.

A cursor carries the generation, the query, the ranker and the offset reached. The
ranked list of a generation is deterministic (see ``SearchService.ranked``), so
following cursors gives every result once, with no gaps, even when a new generation
is published in the middle: the cursor keeps reading the generation it started on.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from core.errors import QueryError

MAX_CURSOR_CHARS = 8192


@dataclass(frozen=True, slots=True)
class Cursor:
    generation: str
    query: str
    ranker: str
    offset: int
    size: int

    def encode(self) -> str:
        raw = json.dumps(
            {"g": self.generation, "q": self.query, "r": self.ranker, "o": self.offset, "s": self.size},
            separators=(",", ":"),
        )
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, token: str) -> Cursor:
        if len(token) > MAX_CURSOR_CHARS:
            raise QueryError("The cursor is too long; use the next_cursor value of a previous response.")
        try:
            data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            cursor = cls(str(data["g"]), str(data["q"]), str(data["r"]), int(data["o"]), int(data["s"]))
        except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise QueryError(
                "The cursor is not valid; use the next_cursor value of a previous response."
            ) from exc
        if cursor.offset < 0 or cursor.size < 1:
            raise QueryError("The cursor is not valid; use the next_cursor value of a previous response.")
        return cursor
