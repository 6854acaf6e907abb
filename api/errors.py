"""Maps Trawl's errors and request validation failures to 4xx JSON: ``{"error", "detail"}``.

Starlette looks handlers up by the exception's MRO, so a handler for a base class
covers its subclasses. A 500 from this API is a bug.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.errors import IndexStateError, QueryError

logger = logging.getLogger(__name__)


def error_response(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


async def _query_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(400, "bad_query", str(exc))


async def _index_error(request: Request, exc: Exception) -> JSONResponse:
    logger.warning("index unavailable: %s", exc)
    return error_response(503, "index_unavailable", str(exc))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())[1:]) or "request"
        problems.append(f"{where}: {err.get('msg', 'invalid value')}")
    return error_response(400, "bad_parameter", "; ".join(problems) or "Invalid request.")


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail))


async def _admin_error(request: Request, exc: Exception) -> JSONResponse:
    from api.protection import AdminDenied

    assert isinstance(exc, AdminDenied)
    return error_response(exc.status, "unauthorized" if exc.status == 401 else "forbidden", str(exc))


async def _not_found(request: Request, exc: Exception) -> JSONResponse:
    return error_response(404, "not_found", str(exc))


async def _manifest_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(400, "bad_generation", str(exc))


async def _config_error(request: Request, exc: Exception) -> JSONResponse:
    return error_response(400, "bad_request", str(exc))


def register_error_handlers(app: FastAPI) -> None:
    from api.protection import AdminDenied
    from api.routes.documents import DocumentNotFound
    from core.errors import ConfigError, ManifestError

    app.add_exception_handler(AdminDenied, _admin_error)
    app.add_exception_handler(DocumentNotFound, _not_found)
    app.add_exception_handler(ManifestError, _manifest_error)
    app.add_exception_handler(ConfigError, _config_error)
    app.add_exception_handler(QueryError, _query_error)
    app.add_exception_handler(IndexStateError, _index_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
