"""``POST /v1/click``: a click on a result of a logged impression.

The impression id comes from the ``X-Trawl-Impression`` header of the search that
showed the result; the search side of experiments (bucketing, interleaving, logging
impressions) is :mod:`api.experiments`.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Annotated

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from api.experiments import get_runtime
from api.params import StrictInt, StrictParams
from api.schemas import ErrorModel
from core.errors import ExperimentsDisabled

router = APIRouter(dependencies=[StrictParams])
PEER_POLL_S = 0.2
"""How often a click waiting for another worker's impression looks for new parts."""


class ClickIn(BaseModel):
    """A click on one result of one impression."""

    model_config = ConfigDict(extra="forbid")

    impression_id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$", description="From X-Trawl-Impression.")]
    doc_id: Annotated[StrictInt, Field(ge=0, lt=2**63, description="The clicked result's doc_id.")]
    position: Annotated[StrictInt, Field(ge=1, le=1000, description="1-based rank on the page shown.")]


class ClickOut(BaseModel):
    click_id: str


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
async def click(request: Request, body: ClickIn) -> JSONResponse:
    """Log a click on a result that the named impression showed at that position.

    A click that does not match its impression raises ``UnknownImpression`` (404) or
    ``BadClick`` (400); the handlers in ``api.errors`` answer them. A repeat of a click
    within the dedup window gets 200 and the first click's id.
    """
    runtime = get_runtime(request)
    if runtime is None:
        raise ExperimentsDisabled("Click logging is not enabled on this server.")
    if runtime.peer_wait_s > 0 and not runtime.knows(body.impression_id):
        # Shown by another worker: its part reaches the disk by its next flush. Waited for
        # here without holding a thread, so unknown ids cannot use up the pool.
        give_up = time.monotonic() + runtime.peer_wait_s
        while not runtime.knows(body.impression_id) and time.monotonic() < give_up:
            if not await anyio.to_thread.run_sync(runtime.catch_up):
                await anyio.sleep(PEER_POLL_S)
    # In the thread pool: a full buffer flushes to disk in this call.
    record = await anyio.to_thread.run_sync(
        partial(runtime.click, impression_id=body.impression_id, doc_id=body.doc_id, position=body.position)
    )
    return JSONResponse({"click_id": record.click_id}, status_code=200 if record.duplicate else 202)
