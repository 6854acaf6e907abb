"""Online experiments around a search: bucket the visitor, search the variant, log what was shown.

The search routes (``/v1/search`` and the web page) call :func:`search_with_experiments`
with their :class:`SearchRequest`. It asks the runtime (:mod:`online.runtime`) which
variant the visitor is in, runs the variant's ranker (both rankers, merged by
:func:`online.interleaving.interleave_responses`, for an interleaving experiment), and
logs the impression, whose id the client sends back with each click (``/v1/click``).
The visitor (randomization unit) is the ``X-Trawl-User`` header, else the ``trawl_uid``
cookie (names in ``settings.experiments``); a new visitor gets a minted id and the cookie.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from fastapi import Request, Response

from api.workers import serving_workers
from core.errors import ConfigError
from core.settings import Settings
from core.types import SearchResponse
from online.book import Assignment, ExperimentBook
from online.interleaving import Team, draw_key, interleave_responses
from online.runtime import ExperimentRuntime
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService

IMPRESSION_HEADER = "X-Trawl-Impression"
COOKIE_MAX_AGE_S = 365 * 86_400


def open_experiments(settings: Settings) -> ExperimentRuntime:
    """Build the runtime for ``app.state.experiments`` (call in the lifespan; close it after ``yield``)."""
    return ExperimentRuntime.from_settings(settings, peers=serving_workers() > 1)


def check_rankers(book: ExperimentBook, served: Collection[str]) -> None:
    """Refuse to start when a running or future experiment names a ranker this service lacks.

    Unchecked, a typo in ``experiments.toml`` would answer every search of the users
    bucketed into that variant with 400 "Unknown ranker", a request they never made.
    """
    unknown = sorted(set(book.rankers(datetime.now(UTC))) - set(served))
    if unknown:
        raise ConfigError(
            f"{book.source}: experiments name ranker(s) this service does not serve: "
            f"{', '.join(unknown)}; it serves: {', '.join(sorted(served))}."
        )


def get_runtime(request: Request) -> ExperimentRuntime | None:
    runtime: ExperimentRuntime | None = getattr(request.app.state, "experiments", None)
    return runtime


def _experiment_settings(request: Request) -> tuple[str, str]:
    settings: Settings | None = getattr(request.app.state, "settings", None)
    s = settings.experiments if settings is not None else Settings.model_fields["experiments"].default
    return s.user_header, s.user_cookie


def user_id(request: Request) -> str | None:
    """The randomization unit: the user header, else the cookie, else None (not bucketed)."""
    header, cookie = _experiment_settings(request)
    value = request.headers.get(header) or request.cookies.get(cookie)
    return value[:128] if value else None


def assignment_for(request: Request, unit_id: str | None) -> Assignment | None:
    """The active experiment's assignment for this user, or None (no runtime, experiment or id)."""
    runtime = get_runtime(request)
    return runtime.assign(unit_id) if runtime is not None else None


def new_impression_id() -> str:
    return uuid.uuid4().hex


def log_impression(
    request: Request,
    response: SearchResponse,
    *,
    unit_id: str | None,
    assignment: Assignment | None,
    teams: Sequence[Team] = (),
    impression_id: str | None = None,
) -> str | None:
    """Record what was shown; returns the impression id for ``X-Trawl-Impression`` (None: not wired)."""
    runtime = get_runtime(request)
    if runtime is None:
        return None
    return runtime.record_impression(
        query=response.query.raw,
        doc_ids=[int(h.doc_id) for h in response.hits],
        assignment=assignment,
        unit_id=unit_id,
        teams=teams,
        ranker=response.ranker,
        generation=response.generation,
        page=response.page,
        size=response.size,
        impression_id=impression_id,
    )


@dataclass(frozen=True, slots=True)
class ExperimentOutcome:
    """A search answered under an experiment: what to render and what to tell the client."""

    response: SearchResponse
    impression_id: str | None
    minted_user_id: str | None
    """Set when the visitor had no id: the cookie to send."""
    cookie_name: str

    def apply(self, http: Response) -> None:
        """Add ``X-Trawl-Impression`` (and a new visitor's cookie) to the HTTP response."""
        if self.impression_id is not None:
            http.headers[IMPRESSION_HEADER] = self.impression_id
        if self.minted_user_id is not None:
            http.set_cookie(
                self.cookie_name, self.minted_user_id, max_age=COOKIE_MAX_AGE_S, httponly=True, samesite="lax"
            )


def search_with_experiments(
    request: Request, service: SearchService, search: SearchRequest
) -> ExperimentOutcome:
    """Assign, search (both rankers and merge, for interleaving), log the impression.

    ``search`` is the request as asked; a variant replaces its ranker. Page ``p`` of an
    interleaving experiment is page ``p`` of one merged list, built from both rankers'
    pages 1 to ``p`` with the same coin flips for the same user, query and generation,
    so following pages repeat and skip nothing (DECISIONS 42). A cursor continues one
    ranker's list: its pages show ranker A alone and are logged outside the experiment,
    as they compare nothing. A request that names its own ranker is logged outside any
    experiment: it must not dilute a variant.
    """
    _, cookie = _experiment_settings(request)
    unit = user_id(request)
    minted = None
    if unit is None and get_runtime(request) is not None:
        unit = minted = uuid.uuid4().hex
    assignment = assignment_for(request, unit) if search.ranker is None else None
    impression_id = new_impression_id()
    teams: tuple[Team, ...] = ()

    def ranked_by(ranker: str, page: int | None = search.page) -> SearchResponse:
        return service.search(dataclasses.replace(search, ranker=ranker, page=page))

    if assignment is None:
        result = service.search(search)
    elif assignment.mode == "interleave":
        first, second = assignment.rankers[0], assignment.rankers[1]
        a = ranked_by(first)
        pages = search.cursor is None  # a cursor has no pages of the other ranker to merge
        if a.page == 1 or pages:
            earlier = [ranked_by(first, k) for k in range(1, a.page)] if pages else []
            b_pages = [ranked_by(second, k) for k in range(1, a.page + 1)] if pages else [ranked_by(second)]
            key = draw_key(unit or "", a.query.raw, a.generation, assignment.rankers)
            result, teams = interleave_responses([*earlier, a], b_pages, key=key)
        else:
            # Nothing was interleaved: logged under the experiment, the page would count
            # as a tie (no team to credit) and pull the measured preference towards zero.
            result, assignment = a, None
    else:
        result = ranked_by(assignment.rankers[0])
    logged = log_impression(
        request, result, unit_id=unit, assignment=assignment, teams=teams, impression_id=impression_id
    )
    return ExperimentOutcome(result, logged, minted, cookie)
