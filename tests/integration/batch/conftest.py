"""A real local Ray for the batch-job tests: started once, only by the tests that ask for it, small."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

RAY_INIT = {
    "address": "local",  # never a stale /tmp/ray/ray_current_cluster of an earlier `ray start`
    "num_cpus": 2,
    "object_store_memory": 200 * 1024 * 1024,
    "include_dashboard": False,
    "log_to_driver": False,
}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Keep each phase's report on the test, so a fixture can tell that its test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def _ray_session() -> Iterator[ModuleType]:
    ray = pytest.importorskip("ray")
    ray.init(**RAY_INIT)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def ray_local(_ray_session: ModuleType, request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """The session's Ray, started afresh after a test that failed: a failed job can leave its
    actors holding both CPUs, and every later test would wait for them forever."""
    yield _ray_session
    report = getattr(request.node, "rep_call", None)
    if report is None or report.failed:
        _ray_session.shutdown()
        _ray_session.init(**RAY_INIT)
