"""Maps Trawl's errors and request validation failures to JSON: ``{"error", "detail"}``.

:data:`HTTP_ERRORS` is the one mapping from error class to (status, code), every code
one of ``api.error_codes``' table; the tree in ``core.errors`` draws the same picture.
Starlette looks a handler up by the exception's MRO, so a class that is not listed gets
its nearest listed ancestor's answer. Routes raise; they never build error responses
themselves. ``BodyTooLarge`` is not here: ``api.protection``'s middleware raises and
answers it (413) outside the app. A 500 from this API is a bug.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.openapi import install
from core.errors import (
    AdminDisabled,
    AdminKeyRejected,
    BadClick,
    BadDocument,
    BadParameter,
    ConfigError,
    CrawlDataMissing,
    DirectoryBusy,
    DocumentNotFound,
    ExperimentsDisabled,
    IndexDamaged,
    IndexStateError,
    NothingToRollBack,
    PushHostNotCrawled,
    PushKeyRejected,
    PushThrottled,
    PushUrlsRejected,
    QueryError,
    StorageError,
    TrawlError,
    UnknownGeneration,
    UnknownImpression,
)

logger = logging.getLogger(__name__)

HTTP_ERRORS: Mapping[type[TrawlError], tuple[int, str]] = {
    ConfigError: (400, "bad_request"),
    BadDocument: (400, "bad_document"),
    QueryError: (400, "bad_query"),
    BadParameter: (400, "bad_parameter"),
    BadClick: (400, "bad_click"),
    DocumentNotFound: (404, "not_found"),
    UnknownGeneration: (404, "unknown_generation"),
    NothingToRollBack: (409, "nothing_to_roll_back"),
    UnknownImpression: (404, "unknown_impression"),
    AdminKeyRejected: (401, "unauthorized"),
    AdminDisabled: (403, "forbidden"),
    IndexStateError: (503, "index_unavailable"),
    IndexDamaged: (409, "index_damaged"),
    DirectoryBusy: (409, "directory_busy"),
    StorageError: (503, "storage_unavailable"),
    ExperimentsDisabled: (503, "experiments_unavailable"),
    CrawlDataMissing: (404, "not_enabled"),
    PushKeyRejected: (403, "key_not_valid"),
    PushUrlsRejected: (422, "urls_not_of_host"),
    PushHostNotCrawled: (422, "host_not_crawled"),
    PushThrottled: (429, "too_many_requests"),
}


def error_response(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


def status_of(exc: TrawlError) -> tuple[int, str] | None:
    """(status, code) of the nearest listed class in ``exc``'s MRO; None when no branch is mapped."""
    return next((HTTP_ERRORS[c] for c in type(exc).__mro__ if c in HTTP_ERRORS), None)


async def _trawl_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TrawlError)
    status, code = status_of(exc) or (500, "internal_error")
    if status >= 500:
        logger.warning("%s: %s", code, exc)
    return error_response(status, code, str(exc))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())[1:]) or "request"
        problems.append(f"{where}: {err.get('msg', 'invalid value')}")
    return error_response(400, "bad_parameter", "; ".join(problems) or "Invalid request.")


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}.get(
        exc.status_code, "bad_request" if exc.status_code < 500 else "internal_error"
    )
    response = error_response(exc.status_code, code, str(exc.detail))
    response.headers.update(exc.headers or {})  # a 405 names the methods that work (Allow)
    return response


def register_error_handlers(app: FastAPI) -> None:
    """The handlers, and the OpenAPI document's account of what they answer (``api.openapi``)."""
    install(app)
    for error in HTTP_ERRORS:
        app.add_exception_handler(error, _trawl_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
