"""Which queries the packaged embedding model reads: hybrid gives the others' vectors no weight.

The packaged model (all-MiniLM-L6-v2) was trained on English. On the Debian Reference in six
languages (DECISIONS 80) its vectors alone found the judged page at MRR@10 .57 in English, .14 in
Japanese and .25 in Chinese, and fused into ``hybrid`` they cost Japanese .05 and Chinese .02
against bm25, and German, Spanish and French readers .000-.009 (English gained .009). So a
query read in another language (``Query.read_as``) or written in a CJK script is ranked by
``hybrid`` on BM25 alone; an English query is fused exactly as before. A multilingual model
would lift the rule.
"""

from __future__ import annotations

from core.types import Query
from retrieval.text.tokenizer import CJK_RUN


def vectors_read(query: Query) -> bool:
    """True when the English model can read ``query``: read as English, no Chinese, Japanese or Korean."""
    return not query.read_as and not CJK_RUN.search(query.positive_text)
