"""Online experiments in the API: ``POST /v1/click`` and the helpers the search route calls.

The search route asks :func:`assignment_for` which variant a request is in, runs the
variant's ranker (both rankers, merged by :func:`interleave_responses`, for an
interleaving experiment), and calls :func:`log_impression`, which returns the
impression id the client sends back with each click. The user (randomization unit)
is the ``X-Trawl-User`` header, else the ``trawl_uid`` cookie (names in
``settings.experiments``); a new visitor gets a minted id and the cookie.
:func:`search_with_experiments` does all of this in one call.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from api.params import StrictInt, StrictParams
from api.schemas import ErrorModel
from core.errors import ConfigError, ExperimentsDisabled
from core.settings import Settings
from core.types import Hit, SearchResponse
from online.book import Assignment, ExperimentBook
from online.interleaving import Team, draw_key, interleave_rng, page_of
from online.runtime import ExperimentRuntime

router = APIRouter(dependencies=[StrictParams])

IMPRESSION_HEADER = "X-Trawl-Impression"
COOKIE_MAX_AGE_S = 365 * 86_400


class ClickIn(BaseModel):
    """A click on one result of one impression."""

    model_config = ConfigDict(extra="forbid")

    impression_id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$", description="From X-Trawl-Impression.")]
    doc_id: Annotated[StrictInt, Field(ge=0, lt=2**63, description="The clicked result's doc_id.")]
    position: Annotated[StrictInt, Field(ge=1, le=1000, description="1-based rank on the page shown.")]


class ClickOut(BaseModel):
    click_id: str


def open_experiments(settings: Settings) -> ExperimentRuntime:
    """Build the runtime for ``app.state.experiments`` (call in the lifespan; close it after ``yield``)."""
    return ExperimentRuntime.from_settings(settings)


def check_rankers(book: ExperimentBook, served: Collection[str]) -> None:
    """Refuse to start when a running or future experiment names a ranker this service lacks.

    Unchecked, a typo in ``experiments.toml`` answered every search of the users bucketed
    into that variant with 400 "Unknown ranker", a request they never made.
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


def interleave_responses(
    a_pages: Sequence[SearchResponse], b_pages: Sequence[SearchResponse], *, key: str
) -> tuple[SearchResponse, tuple[Team, ...]]:
    """Page ``len(a_pages)`` of the team-draft merge of two rankers' lists for one query.

    ``a_pages`` and ``b_pages`` are each ranker's pages 1 to that page (one size): the
    merge of the lists they make, sliced, so page 2 continues exactly where page 1 ended
    (no document twice, none skipped). ``key`` (``draw_key``) fixes the coin flips.
    Returns the last page of ``a`` with the merged hits, and their teams.
    """
    a, b = a_pages[-1], b_pages[-1]
    by_id: dict[int, Hit] = {int(h.doc_id): h for r in (*b_pages, *a_pages) for h in r.hits}
    merged = page_of(
        [int(h.doc_id) for r in a_pages for h in r.hits],
        [int(h.doc_id) for r in b_pages for h in r.hits],
        page=len(a_pages),
        size=a.size,
        rng=interleave_rng(key),
    )
    hits = tuple(by_id[int(d)] for d in merged.doc_ids)  # type: ignore[call-overload]
    return replace(a, hits=hits, ranker=f"{a.ranker}|{b.ranker}"), merged.teams


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
    request: Request,
    search: Callable[[str | None], SearchResponse],
    *,
    forced_ranker: str | None = None,
    search_page: Callable[[str | None, int], SearchResponse] | None = None,
) -> ExperimentOutcome:
    """Assign, search (both rankers and merge, for interleaving), log the impression.

    ``search(ranker)`` answers the request's query with the named ranker (None: the
    service's default); ``search_page(ranker, k)`` answers its page ``k``. Page ``p`` of
    an interleaving experiment is page ``p`` of one merged list, built from both
    rankers' pages 1 to ``p`` with the same coin flips for the same user, query and
    generation: following pages repeat and skip nothing (they showed ranker A's page
    ``p`` before, which repeated documents of B's page 1 and skipped A's own it had
    displaced). Without ``search_page`` (a cursor: it continues one ranker's list),
    later pages show ranker A alone and are logged outside the experiment, as they
    compare nothing. A request that names its own ranker (``forced_ranker``) is logged
    outside any experiment: it must not dilute a variant.
    """
    _, cookie = _experiment_settings(request)
    unit = user_id(request)
    minted = None
    if unit is None and get_runtime(request) is not None:
        unit = minted = uuid.uuid4().hex
    assignment = assignment_for(request, unit) if forced_ranker is None else None
    impression_id = new_impression_id()
    teams: tuple[Team, ...] = ()
    if assignment is None:
        result = search(forced_ranker)
    elif assignment.mode == "interleave":
        first, second = assignment.rankers[0], assignment.rankers[1]
        a = search(first)
        if a.page == 1 or search_page is not None:
            earlier = [search_page(first, k) for k in range(1, a.page)] if search_page else []
            b_pages = (
                [search_page(second, k) for k in range(1, a.page + 1)] if search_page else [search(second)]
            )
            key = draw_key(unit or "", a.query.raw, a.generation, assignment.rankers)
            result, teams = interleave_responses([*earlier, a], b_pages, key=key)
        else:
            # Nothing was interleaved: logged under the experiment, the page would count
            # as a tie (no team to credit) and pull the measured preference towards zero.
            result, assignment = a, None
    else:
        result = search(assignment.rankers[0])
    logged = log_impression(
        request, result, unit_id=unit, assignment=assignment, teams=teams, impression_id=impression_id
    )
    return ExperimentOutcome(result, logged, minted, cookie)


@router.post(
    "/v1/click",
    status_code=202,
    response_model=ClickOut,
    responses={
        200: {"model": ClickOut, "description": "The same click again within the dedup window: not logged."},
        400: {"model": ErrorModel},
        404: {"model": ErrorModel},
        503: {"model": ErrorModel},
    },
    summary="Record a click on a search result",
)
def click(request: Request, body: ClickIn) -> JSONResponse:
    """Log a click on a result that the named impression showed at that position.

    A click that does not match its impression raises ``UnknownImpression`` (404) or
    ``BadClick`` (400); the handlers in ``api.errors`` answer them. A repeat of a click
    within the dedup window gets 200 and the first click's id.
    """
    # Plain ``def``: a full buffer flushes to disk in this call, so it runs in the thread pool.
    runtime = get_runtime(request)
    if runtime is None:
        raise ExperimentsDisabled("Click logging is not enabled on this server.")
    record = runtime.click(impression_id=body.impression_id, doc_id=body.doc_id, position=body.position)
    return JSONResponse({"click_id": record.click_id}, status_code=200 if record.duplicate else 202)
