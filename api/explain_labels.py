"""Names a person reads for the ranking signals the explain page shows.

The learned model's features and the explain record's fields are identifiers
(``bm25_fields_ratio``, ``prf_top5``); the page shows these labels and keeps the
identifier one click away (``<details>``) for the engineer who greps for it.
"""

from __future__ import annotations

__all__ = ["FEATURE_LABELS", "label_of"]

_FIELDS = {"title": "title", "headings": "headings", "body": "text", "anchors": "link texts pointing here"}

FEATURE_LABELS: dict[str, str] = {
    "bm25": "Word match (BM25), whole page",
    "bm25_ratio": "Word match compared with the best result",
    "bm25_fields_ratio": "Word match per field, compared with the best result",
    **{f"bm25_{f}": f"Word match in the {label}" for f, label in _FIELDS.items()},
    "cosine": "Meaning match (vector similarity)",
    "cosine_gap": "Meaning match behind the best result",
    "lexical_rank": "Rank by word match",
    "vector_rank": "Rank by meaning match",
    "rrf": "Combined rank of both",
    **{f"coverage_{f}": f"Share of the query's words in the {label}" for f, label in _FIELDS.items()},
    "phrase_match": "Query words appear as a phrase",
    "bigram_match": "Query word pairs appear together",
    "min_window": "Shortest passage holding the query words",
    "window_density": "Query words close together",
    "title_match_ratio": "Share of the title that is query words",
    "doc_words": "Length of the page",
    "title_words": "Length of the title",
    "url_depth": "Depth of the URL (slashes)",
    "pagerank": "Links into the page (PageRank)",
    "age_days": "Age of the page",
    "lang_match": "Page in the query's language",
    "dup_cluster_size": "Copies of the page elsewhere",
    "page_quality": "Page quality (an index, a listing or a near-empty page)",
    "query_terms": "Number of words in the query",
    **{f"prf_top{n}": f"Shares words with the top {n} results" for n in (5, 10, 20)},
    **{f"dense_prf_top{n}": f"Close in meaning to the top {n} results" for n in (5, 10, 20)},
}


def label_of(identifier: str) -> str:
    """The label of a feature or signal; an unknown one reads as words."""
    return FEATURE_LABELS.get(identifier) or identifier.replace("_", " ").capitalize()
