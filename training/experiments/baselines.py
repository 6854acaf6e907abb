"""A deliberately weaker baseline, ``bm25-notitle``: BM25 without the extra title weight.

Experiments need a known-worse ranker to check that the machinery can tell two
rankers apart in the right direction (and to size experiments for a small, realistic
difference). The title is still indexed inside the body, so this is plain body BM25:
the field boost a real change might remove.
"""

from __future__ import annotations

from retrieval.index.layout import lexical_dir
from retrieval.index.lexical import LexicalShard
from retrieval.index.lexical_query import FieldBoosts
from training.rankers import Bm25Ranker, EvalContext, EvalRanker, register_ranker

NO_TITLE = FieldBoosts(title=1e-6)


@register_ranker("bm25-notitle")
def _bm25_notitle(context: EvalContext) -> EvalRanker:
    ranker = Bm25Ranker(LexicalShard(lexical_dir(context.index_dir, 0), boosts=NO_TITLE))
    ranker.name = "bm25-notitle"
    return ranker
