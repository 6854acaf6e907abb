"""Every branch of the error tree answers the status its picture in ``core.errors`` promises."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI

import core.errors
from api.errors import HTTP_ERRORS, register_error_handlers
from core.errors import ManifestError, ShardUnavailable, TrawlError
from tests.conftest import ServerThread

ROW = re.compile(r"(\w+)\s+→ (\d{3}) (\w+)")
RAISED: dict[str, type[TrawlError]] = {
    cls.__name__: cls
    for cls in vars(core.errors).values()
    if isinstance(cls, type) and issubclass(cls, TrawlError)
}


def _app() -> FastAPI:
    app = FastAPI()
    register_error_handlers(app)

    @app.get("/raise/{name}")
    def raise_it(name: str) -> None:
        raise RAISED[name](f"raised {name}")

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
