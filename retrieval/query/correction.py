"""Spelling corrections of a searched query, checked against what the live index holds.

The speller knows the vocabulary written when the generation was built
(:mod:`retrieval.query.spelling`); this step asks the shards about the words it would
change, so a word indexed in place since the build is not corrected away (DECISIONS 13).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from core.settings import SearchSettings
from core.types import SearchResponse
from retrieval.index.generation import Generation, GenerationSet
from retrieval.index.layout import vocabulary_file
from retrieval.index.lexical_query import analysed
from retrieval.query.parsing import QueryParser
from retrieval.query.request import RequestBudget, SearchRequest
from retrieval.query.spelling import SpellerCache


@dataclass(frozen=True, slots=True)
class Suggestion:
    """The speller's correction of a query, and how much of the query the live index holds."""

    text: str | None
    """The corrected query; None when there is nothing to correct."""
    some_held: bool = True
    """Some word of the query other than stopwords is on a page."""
    all_held: bool = True
    """Every such word is on a page."""


class SpellingCorrector:
    """Suggests a correction of a query, per generation's speller (built once, kept a while)."""

    def __init__(self, settings: SearchSettings, parser: QueryParser) -> None:
        self.parser = parser
        self.spellers = SpellerCache(
            keep=settings.open_generations + 1,
            known_df=settings.spell_known_df,
            max_distance=settings.spell_max_distance,
        )

    def vocabulary(self, generation: Generation) -> Mapping[str, int] | None:
        """The generation's surface words with their document frequencies (None: it has none)."""
        speller = self.spellers.get(generation.id, vocabulary_file(generation.path))
        return None if speller is None else speller.df

    def warm(self, generation: Generation) -> None:
        """Build the generation's speller now rather than in its first query."""
        self.spellers.get(generation.id, vocabulary_file(generation.path))

    def suggestion(
        self, generations: GenerationSet, raw: str, response: SearchResponse, budget: RequestBudget
    ) -> Suggestion:
        """The speller's correction of ``raw``, leaving alone the words the live index holds,
        with whether the index holds some and every one of the query's words other than stopwords.

        The vocabulary is written when a generation is built; pages indexed in place since
        then bring words it lacks, which read as typos of known words ("lisp" for "list")
        and would be rewritten away from the fresh pages that have them. A word the
        vocabulary does not know well enough to leave alone is therefore looked up in the
        shards (one fan-out, only when there is a correction to make) and counts with the
        documents that hold it, as it would after a rebuild. The lookup gets what is left
        of the search's deadline (:class:`RequestBudget`): a slow shard must not cost a
        second deadline.
        """
        with generations.using() as generation:
            if generation is None or generation.id != response.generation:
                return Suggestion(None)  # a publish since: the next search suggests for the new one
            speller = self.spellers.get(generation.id, vocabulary_file(generation.path))
            if speller is None or speller.suggest(raw) is None:
                return Suggestion(None)
            query = self.parser.parse(SearchRequest(raw))
            freqs = generation.broker.term_doc_freqs(query, budget.until())
        indexed: dict[str, int] = {}
        for (_field, term), count in freqs.items():
            indexed[term] = max(indexed.get(term, 0), count)

        def indexed_df(word: str) -> int:
            terms = analysed(word)
            return indexed.get(terms[0], 0) if len(terms) == 1 else 0

        words = {t for text in (*query.terms, *query.phrases) for t in analysed(text)}
        held = [indexed.get(t, 0) > 0 for t in words]
        return Suggestion(speller.suggest(raw, indexed_df=indexed_df), any(held), all(held))
