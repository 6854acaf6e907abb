"""One search as a value: what a caller asks for, the page it names, and its deadline."""

from __future__ import annotations

import time
from dataclasses import KW_ONLY, dataclass


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One search, as a route, ``trawl search`` or ``trawl eval`` asks for it.

    Built once where a search enters (the route's or the command's parameters) and handed
    whole to :meth:`retrieval.query.service.SearchService.search`, whose steps each read
    the fields they need, so a new parameter is declared here and where it is read, not at
    every hop between. It lives beside the service rather than in ``core.types``: every
    caller that builds one holds a ``SearchService`` already, while ``core.types`` keeps
    what packages that never search (the schemas, the experiment logs) read too.

    Values are the caller's, unchecked: the service validates them (paging ranges, a
    ranker's name, the filters' syntax) and names the parameter in its errors.

    Example: ``service.search(SearchRequest("heat transfer", size=20, ranker="bm25"))``.
    """

    q: str | None = None
    """The query as typed, with its operators; None to follow ``cursor``."""
    _: KW_ONLY
    page: int | None = None
    """1-based page (None: the first); capped by ``search.max_page`` (a cursor goes deeper)."""
    size: int | None = None
    """Results per page (None: ``search.default_page_size``)."""
    ranker: str | None = None
    """A ranker's name (None: the generation's default)."""
    cursor: str | None = None
    """``next_cursor`` of an earlier response: continues its list (query, ranker, filters, size)."""
    explain: bool = False
    """Add why each result ranks where it does."""
    site: str | None = None
    lang: str | None = None
    filetype: str | None = None
    spell: bool = True
    """Spelling suggestions and rewrites; False searches exactly what was typed."""
    reader_lang: str | None = None
    """The reader's language (``Accept-Language``, else ``rank.user_lang``): a page's translations
    among the results are shown in it (``retrieval.query.translations``); None: the best-ranked."""
    read_as: str | None = None
    """The language to read the query in, set when a cursor is followed (the first page's);
    None: its ``lang:``, else ``reader_lang`` (``retrieval.text.function_words``)."""
    snippets: bool = True
    """False leaves every snippet empty and changes nothing else (for callers that only
    score the ranked list: making snippets of a deep list costs more than ranking it)."""


@dataclass(frozen=True, slots=True)
class PageRequest:
    """The slice of the ranked list a response shows."""

    offset: int
    size: int

    @property
    def page(self) -> int:
        return self.offset // self.size + 1

    @property
    def depth(self) -> int:
        """How far down the ranked list this page reaches."""
        return self.offset + self.size


CALL_FLOOR = 0.25
"""The share of the deadline a broker call gets even once the request's budget is spent."""


@dataclass(frozen=True, slots=True)
class RequestBudget:
    """One search's deadline, shared by every broker call it makes.

    A fused ranker's list can take several gathering rounds (widening windows) and then a
    fetch; with one deadline per call, a hung shard would cost a deadline per round. Every
    call gets what is left, but at least :data:`CALL_FLOOR` of the deadline (a fetch after
    a slow round must still reach the healthy shards), and no further round starts once
    the budget is spent: a search ends within about 1.5 deadlines, whatever a shard does.
    """

    deadline_s: float
    ends: float

    @classmethod
    def starting_now(cls, deadline_s: float) -> RequestBudget:
        return cls(deadline_s, time.perf_counter() + deadline_s)

    def seconds(self) -> float:
        """For a broker call that takes a duration (``gather``)."""
        return max(self.ends - time.perf_counter(), CALL_FLOOR * self.deadline_s)

    def until(self) -> float:
        """For a broker call that takes an absolute time (``fetch``)."""
        return time.perf_counter() + self.seconds()

    def spent(self) -> bool:
        return time.perf_counter() >= self.ends
