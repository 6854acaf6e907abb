"""Which slice of the ranked list a request asks for: a page number (capped) or a cursor.

A cursor is pinned to a view of a generation and carries the query, its filters, the
ranker and the offset reached (:mod:`retrieval.query.cursor`); following it pages
through that one list, uncapped up to ``search.max_cursor_depth``.
"""

from __future__ import annotations

import dataclasses

from core.errors import BadParameter
from core.settings import SearchSettings
from retrieval.query.cursor import Cursor, CursorCodec
from retrieval.query.request import PageRequest, SearchRequest
from retrieval.text.analyzer import normalize_filetype, normalize_lang, normalize_site


class Pager:
    """Validates paging, follows cursors and mints the next one."""

    def __init__(self, settings: SearchSettings, cursors: CursorCodec) -> None:
        self.settings = settings
        self.cursors = cursors

    def page(self, request: SearchRequest) -> PageRequest:
        """The request's page; errors name the parameter and the allowed range."""
        s = self.settings
        page = 1 if request.page is None else request.page
        size = s.default_page_size if request.size is None else request.size
        if page < 1 or page > s.max_page:
            raise BadParameter(
                f"page={page} is out of range; use 1 to {s.max_page} (or a cursor to go deeper)."
            )
        if size < 1 or size > s.max_page_size:
            raise BadParameter(f"size={size} is out of range; use 1 to {s.max_page_size}.")
        return PageRequest((page - 1) * size, size)

    def decode(self, token: str) -> Cursor:
        return self.cursors.decode(token)

    def follow(self, request: SearchRequest, pinned: Cursor) -> tuple[SearchRequest, PageRequest]:
        """The search ``pinned`` continues (its query, ranker and filters) and its next page.

        A cursor pages through one ranked list: the filters select that list, so a
        different one beside the cursor would mix two lists (and the cursor alone, as
        clients send it, must not drop them)."""
        if request.size is not None and request.size != pinned.size:
            raise BadParameter("size cannot change while following a cursor; start the search again.")
        checks = (
            ("site", request.site, pinned.site, normalize_site),
            ("lang", request.lang, pinned.lang, normalize_lang),
            ("filetype", request.filetype, pinned.filetype, normalize_filetype),
        )
        for name, given, kept, norm in checks:
            if given and (not kept or norm(given) != norm(kept)):
                raise BadParameter(
                    f"{name} cannot change while following a cursor (it pages through the list "
                    f"{name}={kept or '(none)'} selected); start the search again."
                )
        followed = dataclasses.replace(
            request,
            q=pinned.query,
            ranker=pinned.ranker,
            site=pinned.site,
            lang=pinned.lang,
            filetype=pinned.filetype,
            read_as=pinned.read_as,
        )
        return followed, PageRequest(pinned.offset, pinned.size)

    def next_cursor(
        self,
        view: str,
        request: SearchRequest,
        ranker: str,
        page: PageRequest,
        *,
        has_more: bool,
        read_as: str = "",
    ) -> str | None:
        """The cursor to the page after ``page`` (None: the list ends, or the cursor cap), with the
        language the query was read in."""
        depth = page.depth
        if not has_more or depth + page.size > self.settings.max_cursor_depth:
            return None
        assert request.q is not None  # the page was searched: a query was given
        return self.cursors.encode(
            Cursor(
                view,
                request.q,
                ranker,
                depth,
                page.size,
                request.site or None,
                request.lang or None,
                request.filetype or None,
                read_as,
            )
        )
