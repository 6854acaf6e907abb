"""``/docs``: Swagger UI served from the installed ``swagger-ui-bundle-v2`` package, not a CDN.

FastAPI's default docs page loads its script and stylesheet from a CDN, so an offline
machine (or a locked-down network) shows a blank page. The same assets ship in the
``swagger-ui-bundle-v2`` wheel (Swagger UI 5, which reads OpenAPI 3.1; the 4.x of
``swagger-ui-bundle`` does not); they are mounted under :data:`ASSETS` and the page points
there. ReDoc has no packaged assets and is not served.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

__all__ = ["ASSETS", "install_docs"]

ASSETS = "/docs-assets"


def install_docs(app: FastAPI, *, path: str = "/docs") -> None:
    """Serve the interactive API docs at ``path`` (create the app with ``docs_url=None``)."""
    app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")
    oauth2_redirect = f"{path}/oauth2-redirect"

    @app.get(path, include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
            oauth2_redirect_url=oauth2_redirect,
        )

    @app.get(oauth2_redirect, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
