"""Query-time synonyms from a TOML file: ``dict`` also finds ``dictionary``, at a lower weight.

Synonyms are applied when a query is parsed, never baked into the index, so editing the
file takes effect on the next start without a rebuild, and an exact match always outscores
a synonym match: each free query term keeps its weight and gains an OR of its synonyms at
``weight`` times that. Quoted phrases and ``-excluded`` words are left exactly as typed.

Enable it with ``search.synonyms_file`` (``TRAWL_SEARCH__SYNONYMS_FILE=synonyms.toml``); no
file means no synonyms. ``synonyms.example.toml`` at the repository root shows the format:
``weight``, ``equivalent`` groups (a query for any one also finds the others) and an
``[expand]`` table (one-way: a query for the key also finds the values).

Entries are matched after analysis (``Dictionaries`` matches ``dictionary``). A multi-word
entry is searched as a phrase; only single words trigger an expansion.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from core.types import Query
from retrieval.text.tokenizer import analyze

DEFAULT_WEIGHT = 0.5


@dataclass(frozen=True, slots=True)
class Synonyms:
    """An analysed synonym map: query token → the texts it also searches for."""

    expansions: Mapping[str, tuple[str, ...]]
    weight: float = DEFAULT_WEIGHT

    @classmethod
    def from_groups(
        cls,
        equivalent: Sequence[Sequence[str]] = (),
        expand: Mapping[str, Sequence[str]] | None = None,
        *,
        weight: float = DEFAULT_WEIGHT,
    ) -> Synonyms:
        table: dict[str, list[str]] = {}

        def add(source: str, targets: Sequence[str]) -> None:
            key = analyze(source)
            if len(key) != 1:
                return
            mine = table.setdefault(key[0], [])
            for target in targets:
                if analyze(target) and analyze(target) != key and target not in mine:
                    mine.append(target)

        for group in equivalent:
            for word in group:
                add(word, [g for g in group if g != word])
        for source, targets in (expand or {}).items():
            add(source, list(targets))
        return cls({k: tuple(v) for k, v in table.items() if v}, weight)

    @classmethod
    def load(cls, path: Path) -> Synonyms:
        """Read a synonyms file; ConfigError naming the file and the problem."""
        try:
            data: dict[str, Any] = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"search.synonyms_file {path}: {exc}") from exc
        equivalent = data.get("equivalent", [])
        expand = data.get("expand", {})
        weight = data.get("weight", DEFAULT_WEIGHT)
        if not (isinstance(equivalent, list) and all(_words(g) for g in equivalent)):
            raise ConfigError(f"{path}: 'equivalent' must be a list of lists of words.")
        if not (isinstance(expand, dict) and all(_words(v) for v in expand.values())):
            raise ConfigError(f"{path}: [expand] must map a word to a list of words.")
        if not isinstance(weight, int | float) or not 0 < weight < 1:
            raise ConfigError(f"{path}: 'weight' must be a number between 0 and 1 (exclusive).")
        return cls.from_groups(equivalent, expand, weight=float(weight))

    def expand(self, query: Query) -> Query:
        """``query`` with the synonyms of its free terms attached (one per occurrence)."""
        extra = tuple(
            (target, self.weight)
            for term in query.terms
            for token in analyze(term)
            for target in self.expansions.get(token, ())
        )
        return dataclasses.replace(query, expansions=query.expansions + extra) if extra else query


def _words(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)
