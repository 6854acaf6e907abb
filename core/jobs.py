"""Where a batch job runs: in this process (``local``, the default) or on a Ray cluster.

The jobs (embeddings backfill, index build, PageRank, feature frames) are written once
against Trawl's own functions; the engine only decides where those functions run. This
module holds the choice and the Ray session, with no heavy import: ``ray`` is an optional
extra (``pip install -e '.[ray]'``) imported only when a job asks for it, so the local
path needs nothing.

Example::

    engine = JobEngine.from_settings(settings.jobs, engine="ray", address=None)
    with engine.session():          # starts a local Ray, or joins ``auto`` / ``HOST:PORT``
        ...                         # retrieval.batch.ray_jobs / training.ray_training functions
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from core.errors import ConfigError
from core.settings import JobSettings

Engine = Literal["local", "ray"]
ENGINES: tuple[Engine, ...] = ("local", "ray")


class EngineUnavailable(ConfigError):
    """The chosen engine cannot run here: ray is not installed or its cluster cannot be reached."""


def import_ray() -> ModuleType:
    """The ``ray`` module, or a clear error saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise EngineUnavailable(
            "--engine ray needs the ray extra: pip install -e '.[ray]' (or make setup)"
        ) from exc
    return ray


@dataclass(frozen=True, slots=True)
class JobEngine:
    """The engine of one job run and, for Ray, where its cluster is."""

    engine: Engine = "local"
    address: str | None = None
    """None: start a local Ray; ``auto`` or ``HOST:PORT``: join that cluster."""
    num_cpus: int | None = None
    object_store_mb: int | None = None

    @classmethod
    def from_settings(
        cls, settings: JobSettings, *, engine: str | None = None, address: str | None = None
    ) -> JobEngine:
        """Command-line values (when given) over ``TRAWL_JOBS__*`` settings."""
        chosen = engine or settings.engine
        if chosen not in ENGINES:
            raise ConfigError(f"--engine {chosen!r}: choose one of {', '.join(ENGINES)}")
        return cls(
            engine=chosen,
            address=address if address is not None else settings.ray_address,
            num_cpus=settings.ray_num_cpus,
            object_store_mb=settings.ray_object_store_mb,
        )

    @property
    def is_ray(self) -> bool:
        return self.engine == "ray"

    def init_args(self) -> dict[str, Any]:
        """``ray.init`` arguments: join a cluster, or start one sized to this machine."""
        quiet: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if self.address:
            return {"address": self.address, "log_to_driver": False}
        # "local": a new instance, never the cluster a `ray start` on this machine left in
        # /tmp/ray/ray_current_cluster (ray.init() joins that one, dead or alive, and then
        # refuses num_cpus: seen after a test cluster had stopped).
        args = {**quiet, "address": "local", "num_cpus": self.num_cpus or os.cpu_count() or 1}
        if self.object_store_mb:
            args["object_store_memory"] = self.object_store_mb * 1024 * 1024
        return args

    @contextmanager
    def session(self) -> Iterator[ModuleType | None]:
        """Ray connected for the block (None for ``local``).

        A Ray already initialised in this process (a test's, a notebook's) is used as is
        and left running; one started here is shut down on exit.
        """
        if not self.is_ray:
            yield None
            return
        ray = import_ray()
        if ray.is_initialized():
            yield ray
            return
        if self.address and self.address != "auto":
            probe_address(self.address)
        try:
            ray.init(**self.init_args())
        except (ConnectionError, TimeoutError, RuntimeError, ValueError) as exc:
            where = self.address or "a new local instance"
            raise EngineUnavailable(f"cannot reach the Ray cluster at {where}: {exc}") from exc
        try:
            yield ray
        finally:
            ray.shutdown()


def probe_address(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on an unreachable ``HOST:PORT`` (``ray.init`` would retry for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as exc:
        raise EngineUnavailable(f"cannot reach the Ray cluster at {address}: {exc}") from exc


def cluster_cpus(ray: ModuleType) -> int:
    """CPUs of the connected cluster (at least one)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
