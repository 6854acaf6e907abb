"""The explain page's content: a result's ranking signals arranged for a person to read.

``Hit.explain`` is a flat record of everything the ranker saw (BM25, per-field BM25,
ranks, cosine, fusion scores, LTR features and contributions). The page shows it in
the order a ranking is built: the lexical branch (BM25 per query term and field), the
vector branch (rank, cosine), the fusion of the two, and the learned model's features
sorted by how much they moved the score. Rows without a value are not shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ExplainView", "explain_view"]

_SHOWN = frozenset(
    {"shard", "bm25", "field_bm25", "cosine", "lexical_rank", "vector_rank", "final_score", "position",
     "rrf", "rrf_k", "convex", "cosine_weight", "ltr"}
)  # fmt: skip
_FIELD_ORDER = ("title", "headings", "anchors", "body")


@dataclass(frozen=True, slots=True)
class FeatureRow:
    name: str
    value: str
    contribution: float
    share: float
    """|contribution| relative to the largest one, 0..1 (drawn as a bar)."""


@dataclass(slots=True)
class ExplainView:
    summary: list[tuple[str, str]] = field(default_factory=list)
    bm25_total: str = ""
    fields: list[str] = field(default_factory=list)
    terms: list[tuple[str, list[str], str]] = field(default_factory=list)
    """(term, one cell per field, the term's total)."""
    field_totals: list[tuple[str, str]] = field(default_factory=list)
    vector: list[tuple[str, str]] = field(default_factory=list)
    fusion: list[tuple[str, str]] = field(default_factory=list)
    ltr: list[FeatureRow] = field(default_factory=list)
    ltr_summary: list[tuple[str, str]] = field(default_factory=list)
    other: list[tuple[str, str]] = field(default_factory=list)


def _num(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _present(value: Any) -> bool:
    return value not in (None, "", {}, [], ())


def explain_view(ranker: str, info: dict[str, Any], breakdown: dict[str, dict[str, float]]) -> ExplainView:
    """Arrange ``info`` (a hit's explain record) and the BM25 ``breakdown`` for the page."""
    view = ExplainView()
    view.summary = [
        (label, text)
        for label, text in (
            ("ranker", ranker),
            ("final score", _num(info.get("final_score"))),
            ("position", str(info["position"]) if _present(info.get("position")) else ""),
            ("shard", str(info["shard"]) if _present(info.get("shard")) else ""),
        )
        if text
    ]
    if info.get("bm25") is not None:
        view.bm25_total = _num(info["bm25"])
        rank = info.get("lexical_rank")
        if rank is not None:
            view.summary.append(("lexical rank", str(rank)))
    used = {f for cells in breakdown.values() for f in cells}
    view.fields = [f for f in _FIELD_ORDER if f in used] + sorted(used - set(_FIELD_ORDER))
    for term, cells in breakdown.items():
        view.terms.append((term, [_num(cells.get(f)) for f in view.fields], _num(sum(cells.values()))))
    field_bm25 = {f: s for f, s in (info.get("field_bm25") or {}).items() if s}
    view.field_totals = [(f, _num(s)) for f, s in sorted(field_bm25.items(), key=lambda kv: -kv[1])]
    if info.get("vector_rank") is not None or info.get("cosine") is not None:
        view.vector = [
            (label, text)
            for label, text in (
                ("vector rank", str(info["vector_rank"]) if info.get("vector_rank") is not None else ""),
                ("cosine", _num(info.get("cosine"))),
            )
            if text
        ]
    view.fusion = _fusion(info)
    ltr = info.get("ltr")
    if isinstance(ltr, dict):
        view.ltr, view.ltr_summary = _ltr(ltr)
    view.other = [(key, _text(value)) for key, value in info.items() if key not in _SHOWN and _present(value)]
    return view


def _fusion(info: dict[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if info.get("rrf") is not None:
        k = int(info.get("rrf_k") or 60)
        rows.append(("reciprocal rank fusion", _num(info["rrf"], 5)))
        for branch, key in (("lexical", "lexical_rank"), ("vector", "vector_rank")):
            rank = info.get(key)
            if rank is not None:
                rows.append((f"  {branch}: 1 / ({k} + {rank})", _num(1.0 / (k + rank), 5)))
    if info.get("convex") is not None:
        weight = info.get("cosine_weight")
        rows.append(("convex fusion", _num(info["convex"])))
        if weight is not None:
            rows.append(("  weight of cosine (1 − weight of BM25)", _num(weight, 2)))
    return rows


def _ltr(ltr: dict[str, Any]) -> tuple[list[FeatureRow], list[tuple[str, str]]]:
    contributions: dict[str, float] = ltr.get("contributions") or {}
    values: dict[str, Any] = ltr.get("features") or {}
    ordered = sorted(((n, c) for n, c in contributions.items() if c), key=lambda nc: -abs(nc[1]))
    largest = abs(ordered[0][1]) if ordered else 1.0
    rows = [
        FeatureRow(name, _text(values.get(name)), contribution, abs(contribution) / largest)
        for name, contribution in ordered
    ]
    summary = [
        (label, text)
        for label, text in (
            ("model", str(ltr.get("model") or "")),
            ("score", _num(ltr.get("score"))),
            ("base score (bias)", _num(ltr.get("bias"))),
            ("features with no effect (hidden)", str(len(values) - len(rows)) if values else ""),
        )
        if text
    ]
    return rows, summary


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "missing"
    return str(value)
