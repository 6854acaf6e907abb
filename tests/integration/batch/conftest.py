"""A real local Ray for the batch-job tests: started once, only by the tests that ask for it, small."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

RAY_INIT = {
    "num_cpus": 2,
    "object_store_memory": 200 * 1024 * 1024,
    "include_dashboard": False,
    "log_to_driver": False,
}


@pytest.fixture(scope="session")
def ray_local() -> Iterator[ModuleType]:
    ray = pytest.importorskip("ray")
    ray.init(**RAY_INIT)
    try:
        yield ray
    finally:
        ray.shutdown()
