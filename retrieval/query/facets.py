"""Facet counts: how many results of a query each host, file type and language has.

Counted over the whole result set, not the page: each shard walks the term dictionary of
the facet's field restricted to the documents the query matches (Tantivy's
``terms_with_prefix`` with a filter query), and the broker adds the shards' counts. The
``site`` field holds every suffix of a host (``docs.python.org``, ``python.org``, ``org``)
and ``host:port``, so ``site:`` finds subdomains; a host facet keeps the values that are some
document's own host, each with the count the ``site=`` filter then finds.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.errors import BadParameter

__all__ = ["FACET_FIELDS", "FacetValue", "hosts_of", "parse_facets", "top_values"]

FACET_FIELDS: dict[str, str] = {"host": "site", "filetype": "filetype", "lang": "lang"}
"""Facet name (as the API takes it) → the lexical field it counts."""
FILTER_OF = {"host": "site", "filetype": "filetype", "lang": "lang"}
"""Facet name → the search parameter that narrows to one of its values."""
_PORT = re.compile(r":[0-9]+$")


@dataclass(frozen=True, slots=True)
class FacetValue:
    value: str
    count: int


def parse_facets(text: str | None) -> tuple[str, ...]:
    """``"host,lang"`` → ``("host", "lang")``; a :class:`BadParameter` naming an unknown facet."""
    if not text:
        return ()
    names = tuple(dict.fromkeys(n.strip().lower() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FACET_FIELDS]
    if unknown:
        raise BadParameter(
            f"facets={text!r}: unknown facet {', '.join(map(repr, unknown))}; "
            f"use any of {', '.join(FACET_FIELDS)}, separated by commas."
        )
    return names


def _parent(value: str) -> str | None:
    """The ``site`` term one level up: ``a.b.c`` → ``b.c``, ``host:8080`` → ``host``."""
    if _PORT.search(value):
        return _PORT.sub("", value)
    return value.split(".", 1)[1] if "." in value else None


def hosts_of(counts: Mapping[str, int]) -> dict[str, int]:
    """The ``site`` terms that are some document's own host, with their ``site=`` counts.

    A term's documents are its own plus its children's (one label more, or a port);
    the term is a host when it has documents of its own."""
    below: Counter[str] = Counter()
    for value, count in counts.items():
        parent = _parent(value)
        if parent is not None and parent in counts:
            below[parent] += count
    return {value: count for value, count in counts.items() if count > below[value]}


def top_values(facet: str, counts: Iterable[Mapping[str, int]], limit: int) -> list[FacetValue]:
    """The shards' counts of one facet added up, largest first (ties by value), at most ``limit``."""
    total: Counter[str] = Counter()
    for shard in counts:
        total.update(shard)
    merged = hosts_of(total) if facet == "host" else dict(total)
    ranked = sorted(merged.items(), key=lambda vc: (-vc[1], vc[0]))
    return [FacetValue(value, count) for value, count in ranked[:limit] if count > 0]
