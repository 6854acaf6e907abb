"""The explain page's content: a result's ranking signals arranged for a person to read.

``Hit.explain`` is a flat record of everything the ranker saw. The page leads with how
the score adds up (:class:`ScorePart` rows that sum to the score shown, to the last
digit: the learned model's starting point and each feature's effect, or a fusion's two
parts, or each query word's BM25), then the word-by-field BM25 table (whose row and
column totals add up to the BM25 shown), the vector branch and what else was recorded.
Rows are named for people (``api.explain_labels``) with the identifier kept beside them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from api.explain_labels import label_of

__all__ = ["ExplainView", "ScorePart", "explain_view"]

_SHOWN = frozenset(
    {"shard", "bm25", "field_bm25", "cosine", "lexical_rank", "vector_rank", "final_score", "position",
     "rrf", "rrf_k", "convex", "cosine_weight", "bm25_scaled", "cosine_scaled", "ltr"}
)  # fmt: skip
_FIELD_ORDER = ("title", "headings", "anchors", "body")
_FIELD_NAMES = {"title": "title", "headings": "headings", "anchors": "link texts", "body": "text"}
TINY = 5e-5
"""Effects smaller than this (0.0000 at four decimals) are shown together in one row."""


@dataclass(frozen=True, slots=True)
class ScorePart:
    label: str
    identifier: str
    """What an engineer greps for ("" for a part that is not one signal)."""
    value: str
    """The signal's own value, as read ("" when the part is not a signal)."""
    amount: float
    """What this part adds to the score (the parts sum to it)."""
    share: float = 0.0
    """|amount| relative to the largest part, 0..1 (drawn as a bar)."""


@dataclass(slots=True)
class ExplainView:
    summary: list[tuple[str, str]] = field(default_factory=list)
    score_parts: list[ScorePart] = field(default_factory=list)
    score_total: float | None = None
    score_note: str = ""
    bm25_total: str = ""
    fields: list[str] = field(default_factory=list)
    terms: list[tuple[str, list[str], str]] = field(default_factory=list)
    """(word, one cell per field, the word's total); the last row holds the column totals."""
    vector: list[tuple[str, str]] = field(default_factory=list)
    other: list[tuple[str, str, str]] = field(default_factory=list)
    """(label, identifier, value)."""


def _num(value: float | None, digits: int = 4) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _present(value: Any) -> bool:
    return value not in (None, "", {}, [], ())


def explain_view(ranker: str, info: dict[str, Any], breakdown: dict[str, dict[str, float]]) -> ExplainView:
    """Arrange ``info`` (a hit's explain record) and the BM25 ``breakdown`` for the page."""
    view = ExplainView()
    final = info.get("final_score")
    view.summary = [
        (label, text)
        for label, text in (
            ("Ranker", ranker),
            ("Score", _num(final)),
            ("Position", str(info["position"]) if _present(info.get("position")) else ""),
            ("Rank by word match", str(info["lexical_rank"]) if _present(info.get("lexical_rank")) else ""),
            ("Rank by meaning match", str(info["vector_rank"]) if _present(info.get("vector_rank")) else ""),
            ("Shard", str(info["shard"]) if _present(info.get("shard")) else ""),
        )
        if text
    ]
    word_totals = _bm25_table(view, info, breakdown)
    view.vector = (
        [("Meaning match (cosine similarity)", _num(info["cosine"]))] if _present(info.get("cosine")) else []
    )
    parts, total, note = _score_parts(info, word_totals)
    if parts and total is not None:
        view.score_parts, view.score_total, view.score_note = _balanced(parts, total), total, note
    view.other = [
        (label_of(key), key, _text(value))
        for key, value in info.items()
        if key not in _SHOWN and _present(value)
    ]
    return view


def _bm25_table(
    view: ExplainView, info: dict[str, Any], breakdown: dict[str, dict[str, float]]
) -> list[ScorePart]:
    """Fill the word × field table; the words' totals (with what is not broken down) as parts."""
    bm25 = info.get("bm25")
    if bm25 is None and not breakdown:
        return []
    used = {f for cells in breakdown.values() for f in cells}
    view.fields = [f for f in _FIELD_ORDER if f in used] + sorted(used - set(_FIELD_ORDER))
    totals = {f: 0.0 for f in view.fields}
    parts: list[ScorePart] = []
    for term, cells in breakdown.items():
        view.terms.append((term, [_num(cells.get(f)) for f in view.fields], _num(sum(cells.values()))))
        parts.append(ScorePart(f"the word {term}", "", "", sum(cells.values())))
        for f, v in cells.items():
            totals[f] += v
    if bm25 is not None:
        view.bm25_total = _num(bm25)
        rest = bm25 - sum(totals.values())
        if abs(rest) >= TINY:  # phrase and proximity boosts, synonyms: scored with the query, not per word
            view.terms.append(("not broken down by word", ["" for _ in view.fields], _num(rest)))
        if view.terms:
            view.terms.append(("total", [_num(totals[f]) for f in view.fields], _num(bm25)))
    view.fields = [_FIELD_NAMES.get(f, f) for f in view.fields]
    return parts


def _score_parts(info: dict[str, Any], words: list[ScorePart]) -> tuple[list[ScorePart], float | None, str]:
    """The parts of the ranker's score, its total, and one sentence on how they combine."""
    ltr = info.get("ltr")
    if isinstance(ltr, dict) and ltr.get("score") is not None:
        values: dict[str, Any] = ltr.get("features") or {}
        parts = [ScorePart("Starting point (the model's average)", "bias", "", float(ltr.get("bias") or 0.0))]
        parts += [
            ScorePart(label_of(name), name, _text(values.get(name)), float(amount))
            for name, amount in (ltr.get("contributions") or {}).items()
        ]
        return (
            parts,
            float(ltr["score"]),
            "The learned model's score: its starting point plus what each signal added.",
        )
    if info.get("convex") is not None:
        w = float(info.get("cosine_weight") or 0.0)
        parts = [
            ScorePart("Word match, scaled 0–1 among the candidates", "bm25_scaled",
                      _num(info.get("bm25_scaled")), (1.0 - w) * float(info.get("bm25_scaled") or 0.0)),
            ScorePart("Meaning match, scaled 0–1 among the candidates", "cosine_scaled",
                      _num(info.get("cosine_scaled")), w * float(info.get("cosine_scaled") or 0.0)),
        ]  # fmt: skip
        note = f"Convex fusion: {1 - w:.2f} × the scaled word match + {w:.2f} × the scaled meaning match."
        return parts, float(info["convex"]), note
    if info.get("rrf") is not None:
        k = int(info.get("rrf_k") or 60)
        parts = [
            ScorePart(f"{label}: 1 / ({k} + rank {info[key]})", key, str(info[key]), 1.0 / (k + info[key]))
            for label, key in (("Word match", "lexical_rank"), ("Meaning match", "vector_rank"))
            if info.get(key) is not None
        ]
        return (
            parts,
            float(info["rrf"]),
            "Reciprocal rank fusion: each list adds 1 / (k + the result's rank in it).",
        )
    if words and info.get("bm25") is not None and info.get("final_score") == info.get("bm25"):
        return words, float(info["bm25"]), "BM25: what each query word scores in each field of the page."
    return [], None, ""


def _balanced(parts: list[ScorePart], total: float) -> list[ScorePart]:
    """Largest effect first, the tiny ones in one row, and a row for what the parts leave over,
    so that the rows always add up to ``total``."""
    shown = [p for p in parts if abs(p.amount) >= TINY or p.identifier == "bias"]
    tiny = [p for p in parts if p not in shown and p.amount != 0.0]
    shown.sort(key=lambda p: (p.identifier != "bias", -abs(p.amount)))
    if tiny:
        amount = math.fsum(p.amount for p in tiny)
        many = "s, each" if len(tiny) > 1 else ","
        shown.append(ScorePart(f"{len(tiny)} more signal{many} too small to show", "", "", amount))
    rest = total - math.fsum(p.amount for p in shown)
    if abs(rest) >= TINY or (rest and not shown):
        shown.append(ScorePart("Not broken down (phrases, proximity, synonyms)", "", "", rest))
    elif rest:  # float32 arithmetic's rounding: given to the largest row, not a "-0.0000" row of its own
        i = max(range(len(shown)), key=lambda k: abs(shown[k].amount))
        shown[i] = dataclasses.replace(shown[i], amount=shown[i].amount + rest)
    largest = max((abs(p.amount) for p in shown), default=1.0) or 1.0
    return [ScorePart(p.label, p.identifier, p.value, p.amount, abs(p.amount) / largest) for p in shown]


def _text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if value is None:
        return "not available"
    return str(value)
