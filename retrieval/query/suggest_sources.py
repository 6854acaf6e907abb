"""What a generation offers to complete: its documents' titles and headings, and its word counts.

A title or heading is as important as its page: half of log(1 + PageRank / the generation's
mean PageRank); a heading ranks below its page's title.
Section numbers ("8.9.2. ") are dropped from the text. Documents are read from the shards
in this process; shards in other processes (``--shard-urls``) keep theirs, so a broker over
remote shards completes from past queries only. The word counts
are the generation's surface vocabulary, the one the speller reads
(:mod:`retrieval.index.vocabulary`).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping

from retrieval.index.generation import Generation
from retrieval.index.layout import vocabulary_file
from retrieval.index.vocabulary import Vocabulary
from retrieval.query.spelling import SpellerCache
from retrieval.query.suggest import Phrase

logger = logging.getLogger(__name__)

RANK_WEIGHT = 0.5
"""Against log(1 + df) of the completed word: a hub page (an index, a contents page) must not
put its section headings above the pages they list."""
HEADING_PENALTY = 1.0
MAX_HEADINGS = 30
"""Headings of one page offered (a long reference page has hundreds)."""
_SECTION_NUMBER = re.compile(r"^\d+(?:\.\d+)*\.?\s+")


def without_number(text: str) -> str:
    """``8.9.2. The async for statement`` → ``The async for statement``."""
    return _SECTION_NUMBER.sub("", text.strip(), count=1)


def generation_phrases(generation: Generation) -> list[Phrase]:
    """Titles and headings of every document the generation's in-process shards hold."""
    pages: list[tuple[str, str, tuple[str, ...], float]] = []
    for replicas in generation.broker.shards:
        lexical = getattr(replicas[0], "lexical", None)
        if lexical is None:
            continue  # a remote or failed shard
        pages.extend((d.url, d.title, d.headings[:MAX_HEADINGS], d.pagerank) for d in lexical.iter_stored())
    mean_rank = sum(page[3] for page in pages) / len(pages) if pages else 0.0
    phrases: list[Phrase] = []
    for url, title, headings, pagerank in pages:
        importance = RANK_WEIGHT * math.log1p(pagerank / mean_rank if mean_rank > 0 else 1.0)
        if title.strip():
            phrases.append(Phrase(without_number(title), "title", url, importance))
        phrases.extend(
            Phrase(without_number(h), "heading", url, importance - HEADING_PENALTY) for h in headings
        )
    return phrases


def word_counts(generation: Generation, spellers: SpellerCache | None = None) -> Mapping[str, int]:
    """In how many documents each surface word occurs: the speller's copy when it has one."""
    path = vocabulary_file(generation.path)
    if spellers is not None and (speller := spellers.get(generation.id, path)) is not None:
        return speller.df
    try:
        return Vocabulary.load(path).df
    except (OSError, ValueError) as exc:
        logger.info(
            "generation %s: no vocabulary (%s); suggestions rank without word counts", generation.id, exc
        )
        return {}
