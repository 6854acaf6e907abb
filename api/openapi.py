"""The OpenAPI document, made to say what the API does.

FastAPI's generated schema lists a 422 that this API never answers (validation
failures are 400 ``bad_parameter``, ``api.errors``), omits the 400s, 429s and 503s
that handlers and the protection middleware do answer, and cannot know limits that
come from settings. :func:`install` replaces ``app.openapi`` with the generated
document corrected on those points; the paging caps are read from the serving
settings (``app.state.settings``, set at start-up), so ``/openapi.json`` and the
refusals agree.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from api.schemas import ErrorModel
from core.settings import SearchSettings, Settings

ERROR_REF = {"$ref": "#/components/schemas/ErrorModel"}
UNLIMITED = ("/healthz", "/readyz", "/metrics")
"""Paths the rate limiter never refuses (see ``api.protection``)."""


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR_REF}}}


def _bound(schema: dict[str, Any], low: int, high: int) -> None:
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "integer":
            branch["minimum"], branch["maximum"] = low, high


def _is_admin(operation: dict[str, Any]) -> bool:
    """Behind the admin key: it takes ``X-API-Key`` (``api.protection.require_admin``)."""
    parameters = operation.get("parameters", [])
    return any(p.get("in") == "header" and p["name"].lower() == "x-api-key" for p in parameters)


def correct(schema: dict[str, Any], search: SearchSettings) -> dict[str, Any]:
    """``schema`` with the API's real error answers and the settings' paging caps."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components.setdefault("ErrorModel", ErrorModel.model_json_schema())
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    caps = {"page": (1, search.max_page), "size": (1, search.max_page_size)}
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            if _is_admin(operation):
                responses.setdefault("401", _error("Missing or wrong X-API-Key."))
                responses.setdefault("403", _error("Admin endpoints are off (no admin key configured)."))
            if operation.get("parameters") or operation.get("requestBody"):
                responses.setdefault(
                    "400", _error("A parameter or the body is not usable (bad_parameter, …).")
                )
            if path not in UNLIMITED:
                responses.setdefault("429", _error("Too many requests from this client; see Retry-After."))
                responses.setdefault("503", _error("The index (or the part this needs) is not available."))
            if path == "/v1/search":
                for parameter in operation.get("parameters", []):
                    if parameter["name"] in caps:
                        _bound(parameter["schema"], *caps[parameter["name"]])
    return schema


def install(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            settings: Settings | None = getattr(app.state, "settings", None)
            search = settings.search if settings is not None else SearchSettings()
            generated = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            app.openapi_schema = correct(generated, search)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
