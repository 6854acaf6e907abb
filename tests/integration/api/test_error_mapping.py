"""Every branch of the error tree answers the status its picture in ``core.errors`` promises."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI

import core.errors
from api.errors import HTTP_ERRORS, register_error_handlers
from core.errors import DatabaseUnavailable, DiskFull, ManifestError, ShardUnavailable, TrawlError
from tests.conftest import ServerThread

ROW = re.compile(r"(\w+)\s+→ (\d{3}) (\w+)")
RAISED: dict[str, type[TrawlError]] = {
    cls.__name__: cls
    for cls in vars(core.errors).values()
    if isinstance(cls, type) and issubclass(cls, TrawlError)
}
STORAGE: dict[str, TrawlError] = {
    "DiskFull": DiskFull("/srv/trawl/crawl", 3 * 2**20),
    "DatabaseUnavailable": DatabaseUnavailable("PostgreSQL unreachable for over 180 s (crawl.db_outage_s)"),
}


def _app() -> FastAPI:
    app = FastAPI()
    register_error_handlers(app)

    @app.get("/raise/{name}")
    def raise_it(name: str) -> None:
        raise RAISED[name](f"raised {name}")

    @app.get("/storage/{name}")
    def storage_fails(name: str) -> None:
        raise STORAGE[name]  # built as the crawl builds them (DiskFull takes a path, free bytes)

    return app


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with ServerThread(_app()) as running, httpx.Client(base_url=running.url, timeout=10) as c:
        yield c


def test_the_docstring_tree_is_the_mapping() -> None:
    drawn = {m[1]: (int(m[2]), m[3]) for m in ROW.finditer(core.errors.__doc__ or "")}
    mapped = {cls.__name__: answer for cls, answer in HTTP_ERRORS.items()}
    assert drawn.pop("BodyTooLarge") == (413, "too_large")  # answered by the protection middleware
    assert drawn == mapped


@pytest.mark.parametrize(("error", "answer"), [(c.__name__, a) for c, a in HTTP_ERRORS.items()])
def test_each_mapped_error_answers_its_status(
    client: httpx.Client, error: str, answer: tuple[int, str]
) -> None:
    r = client.get(f"/raise/{error}")
    assert (r.status_code, r.json()) == (answer[0], {"error": answer[1], "detail": f"raised {error}"})


@pytest.mark.parametrize("error", [ManifestError, ShardUnavailable])
def test_index_state_errors_are_503(client: httpx.Client, error: type[TrawlError]) -> None:
    r = client.get(f"/raise/{error.__name__}")
    assert (r.status_code, r.json()["error"]) == (503, "index_unavailable")


@pytest.mark.parametrize("name", sorted(STORAGE))
def test_storage_errors_are_503_with_their_own_words(client: httpx.Client, name: str) -> None:
    """A full disk or a database gone answered 500 "internal_error" when one reached a route
    (a seed or an IndexNow push written to the crawl's directory): the request was fine."""
    r = client.get(f"/storage/{name}")
    assert (r.status_code, r.json()) == (
        503,
        {"error": "storage_unavailable", "detail": str(STORAGE[name])},
    )
    assert name != "DiskFull" or r.json()["detail"].startswith("disk full: /srv/trawl/crawl (3.0 MB free)")
