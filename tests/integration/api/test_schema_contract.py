"""Schemathesis against the running API: no server errors, and every answer is one the schema lists."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.app import create_app
from core.settings import Settings
from retrieval.index.build import build_index
from tests.conftest import ServerThread
from tests.fixtures.docs import SMALL_WEB

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    root = tmp_path_factory.mktemp("contract")
    build_index(SMALL_WEB, root / "index", shards=2)
    config = Settings(data_dir=root / "data", api={"rate_limit_per_s": 0})  # type: ignore[arg-type]
    with ServerThread(create_app(config, index_dir=root / "index")) as running:
        yield running


def test_api_answers_as_its_schema_says(server: ServerThread) -> None:
    """Bounded examples per operation (about 30 s in all); every failure is collected."""
    api = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    failures: list[str] = []
    for result in api.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def answers(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=CHECKS)

        try:
            answers()
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - one run reports every operation
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_wrong_method_is_405_with_allow(server: ServerThread) -> None:
    r = httpx.post(f"{server.url}/v1/search", params={"q": "x"})
    assert r.status_code == 405 and r.headers["allow"] == "GET"
    assert r.json()["error"] == "method_not_allowed"


def test_schema_paging_limits_come_from_settings(server: ServerThread) -> None:
    spec = httpx.get(f"{server.url}/openapi.json").json()
    operation = spec["paths"]["/v1/search"]["get"]
    bounds = {
        p["name"]: next(b for b in p["schema"].get("anyOf", [p["schema"]]) if b.get("type") == "integer")
        for p in operation["parameters"]
        if p["name"] in ("page", "size")
    }
    search = Settings().search
    assert (bounds["page"]["minimum"], bounds["page"]["maximum"]) == (1, search.max_page)
    assert (bounds["size"]["minimum"], bounds["size"]["maximum"]) == (1, search.max_page_size)
    assert all("422" not in op["responses"] for path in spec["paths"].values() for op in path.values())
    assert "400" in operation["responses"]
