"""Every error answer's code comes from one table (``api.error_codes``) with that table's status,
and docs/api-errors.md prints the same table."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.error_codes import ERROR_CODES, markdown_table
from api.errors import HTTP_ERRORS
from core.settings import Settings
from tests.fixtures.docs import numbered_index

KEY = "admin-key-for-error-codes"
REPO = Path(__file__).resolve().parents[3]

# (method, path, params, json body, headers, the code a person would expect)
CATALOGUE: list[tuple[str, str, dict[str, str], Any, dict[str, str], str]] = [
    ("GET", "/v1/search", {"q": ""}, None, {}, "bad_query"),
    ("GET", "/v1/search", {"q": "-only"}, None, {}, "bad_query"),
    ("GET", "/v1/search", {"q": "lang:klingon-tongue"}, None, {}, "bad_query"),
    ("GET", "/v1/search", {}, None, {}, "bad_parameter"),
    ("GET", "/v1/search", {"q": "alpha", "pgae": "2"}, None, {}, "bad_parameter"),
    ("GET", "/v1/search", {"q": "alpha", "ranker": "magic"}, None, {}, "bad_parameter"),
    ("GET", "/v1/search", {"q": "alpha", "size": "1000"}, None, {}, "bad_parameter"),
    ("GET", "/v1/search", {"q": "alpha", "page": "²"}, None, {}, "bad_parameter"),
    ("GET", "/v1/search", {"q": "alpha", "cursor": "not-a-cursor"}, None, {}, "bad_parameter"),
    ("GET", "/v1/search", {"q": "alpha", "site": "exa mple"}, None, {}, "bad_parameter"),
    ("GET", "/v1/search", {"q": "alpha", "lang": "klingon-tongue"}, None, {}, "bad_parameter"),
    ("GET", "/v1/search", {"q": "alpha", "explain": "maybe"}, None, {}, "bad_parameter"),
    ("GET", "/v1/documents/12", {}, None, {}, "not_found"),
    ("GET", "/v1/documents/x", {}, None, {}, "bad_parameter"),
    ("GET", "/no/such/page.json", {}, None, {}, "not_found"),
    ("DELETE", "/v1/search", {"q": "alpha"}, None, {}, "method_not_allowed"),
    ("POST", "/v1/index/publish", {}, {"generation": "nope"}, {}, "unauthorized"),
    ("POST", "/v1/index/publish", {}, {"generation": "nope"}, {"X-API-Key": KEY}, "unknown_generation"),
    ("POST", "/v1/index/publish", {}, {"generation": "../x"}, {"X-API-Key": KEY}, "bad_parameter"),
    ("POST", "/v1/index/rollback", {}, {}, {"X-API-Key": KEY}, "nothing_to_roll_back"),
    (
        "POST",
        "/v1/click",
        {},
        {"impression_id": "0" * 32, "doc_id": 1, "position": 1},
        {},
        "unknown_impression",
    ),
    ("PUT", "/v1/documents/a", {}, {"url": "https://a.example/"}, {"X-API-Key": KEY}, "not_enabled"),
    ("POST", "/v1/index/publish", {}, {"generation": "x" * 70_000}, {"X-API-Key": KEY}, "too_large"),
]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    root = tmp_path_factory.mktemp("error-codes")
    index_dir = numbered_index(root / "index", ["alpha beta", "beta gamma", "gamma alpha"])
    settings = Settings.model_validate(
        {"api": {"rate_limit_per_s": 0, "admin_api_key": KEY}, "search": {"use_vectors": False}}
    )
    with TestClient(create_app(settings, index_dir=index_dir), raise_server_exceptions=False) as c:
        yield c


def test_every_mapped_error_uses_a_code_of_the_table_with_its_status() -> None:
    for error, (status, code) in HTTP_ERRORS.items():
        assert code in ERROR_CODES, (error.__name__, code)
        assert ERROR_CODES[code].status == status, (error.__name__, code, status)


def test_the_docs_print_the_table() -> None:
    assert markdown_table() in (REPO / "docs" / "api-errors.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("method", "path", "params", "body", "headers", "expected"), CATALOGUE)
def test_each_mistake_answers_its_code_from_the_table(
    client: TestClient,
    method: str,
    path: str,
    params: dict[str, str],
    body: Any,
    headers: dict[str, str],
    expected: str,
) -> None:
    answer = client.request(method, path, params=params, json=body, headers=headers)
    assert answer.headers["content-type"].startswith("application/json"), answer.text
    error = answer.json()
    assert set(error) == {"error", "detail"} and error["detail"], error
    assert error["error"] == expected, (method, path, params, error)
    assert answer.status_code == ERROR_CODES[expected].status, (answer.status_code, error)


def test_the_catalogue_reaches_most_of_the_table() -> None:
    """The catalogue is the check: it must keep exercising a good part of the table."""
    reached = {row[-1] for row in CATALOGUE}
    assert reached <= set(ERROR_CODES)
    assert len(reached) >= 10
