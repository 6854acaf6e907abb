"""Shard deployments on Ray Serve: started, scaled, reported and stopped for ``trawl serve --engine ray``.

Each shard is its own Serve application (``trawl-shard-N``, one deployment of
:class:`retrieval.ray_serve.replica.ShardReplica`), so scaling one shard redeploys only it
and Serve adds or removes replicas without restarting the others. Serve places the
replicas, health-checks them and restarts a dead one; the broker in the API process
reaches them through deployment handles (:class:`retrieval.ray_serve.backend.RayShard`).
The :class:`retrieval.ray_serve.shipping.IndexSource` actor is pinned to this machine,
the one holding the index root. Serve's HTTP proxy stays off: the API is the ingress.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from importlib import import_module
from typing import Any

from core.errors import ConfigError
from core.jobs import JobEngine, import_ray
from core.settings import SearchSettings
from retrieval.ray_serve.backend import RayShard
from retrieval.ray_serve.config import RayServeConfig, check_placement
from retrieval.ray_serve.replica import ShardReplica
from retrieval.ray_serve.shipping import IndexSource

logger = logging.getLogger(__name__)

__all__ = ["NAMESPACE", "RayShards", "app_name"]

NAMESPACE = "trawl"
SOURCE_NAME = "trawl-index-source"
_QUIET = {"enable_access_log": False, "log_level": "WARNING"}


def app_name(shard: int) -> str:
    return f"trawl-shard-{shard}"


def shard_application(args: dict[str, Any]) -> Any:
    """The application builder a Serve config names (``import_path``): one shard's deployment."""
    from ray import serve

    make: Any = serve.deployment  # typed for decorators only
    return make(ShardReplica, name="shard").bind(
        int(args["shard"]), SOURCE_NAME, NAMESPACE, str(args["node_data"]), dict(args["settings"])
    )


def serve_plan(config: RayServeConfig, settings: SearchSettings) -> dict[str, Any]:
    """The Ray Serve config (``serve deploy``'s schema) of every shard application.

    Deployed declaratively, not with ``serve.run``: Serve then versions each application by
    its import path and arguments, so a changed replica count scales it in place, where
    ``serve.run`` would roll every replica (seen: ``trawl shard scale`` restarted them all).
    """
    applications = []
    for shard in range(config.shards):
        spec = config.replicas(shard)
        applications.append(
            {
                "name": app_name(shard),
                "route_prefix": None,
                "import_path": f"{__name__}:shard_application",
                "args": {
                    "shard": shard,
                    "node_data": config.node_data,
                    "settings": settings.model_dump(mode="json"),
                },
                "logging_config": _QUIET,
                "deployments": [
                    {
                        "name": "shard",
                        "num_replicas": spec.count,
                        "ray_actor_options": {"num_cpus": spec.num_cpus, "resources": dict(spec.resources)},
                        "max_ongoing_requests": 32,
                        "health_check_period_s": 2.0,
                        "health_check_timeout_s": 30.0,
                        "graceful_shutdown_timeout_s": 2.0,
                    }
                ],
            }
        )
    return {"proxy_location": "Disabled", "applications": applications}


def apply_plan(plan: dict[str, Any], *, wait_s: float = 600.0) -> None:
    """Deploy ``plan`` and wait until every application in it runs (or say why one does not)."""
    from ray import serve
    from ray.serve._private.api import serve_start
    from ray.serve.schema import ServeDeploySchema

    # The controller's declarative deploy, as `serve deploy` and the REST API call it; Ray
    # has no public Python call for a config (serve.run versions by a random code version).
    client = serve_start(proxy_location="Disabled", logging_config=_QUIET)
    client.deploy_apps(ServeDeploySchema.model_validate(plan))
    names = [app["name"] for app in plan["applications"]]
    deadline = time.monotonic() + wait_s
    while True:
        applications = serve.status().applications
        states = {n: applications[n] for n in names if n in applications}
        failed = [f"{n}: {a.message}" for n, a in states.items() if str(a.status).endswith("DEPLOY_FAILED")]
        if failed:
            raise ConfigError("Ray Serve could not deploy " + "; ".join(failed))
        if len(states) == len(names) and all(str(a.status).endswith("RUNNING") for a in states.values()):
            return
        if time.monotonic() > deadline:
            raise ConfigError(f"Ray Serve did not start every shard within {wait_s:.0f} s: {states}")
        time.sleep(0.2)


def scale_shard(address: str, shard: int, count: int, *, wait_s: float = 300.0) -> None:
    """Set ``shard``'s replica count on the cluster where ``trawl serve --engine ray`` runs.

    The plan it deployed is read back from its index source; only this shard's count
    changes, so Serve adds or removes replicas of it and touches nothing else.
    """
    if count < 1:
        raise ConfigError("A shard needs at least one replica.")
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
    try:
        source = ray.get_actor(SOURCE_NAME, namespace=NAMESPACE)
    except ValueError:
        raise ConfigError(f"No `trawl serve --engine ray` is running on the cluster at {address}.") from None
    plan = ray.get(source.plan.remote())
    names = [app["name"] for app in plan["applications"]]
    if app_name(shard) not in names:
        raise ConfigError(f"There is no shard {shard}: the served index has shards 0 to {len(names) - 1}.")
    plan["applications"][names.index(app_name(shard))]["deployments"][0]["num_replicas"] = count
    apply_plan(plan, wait_s=wait_s)
    ray.get(source.remember_plan.remote(plan))


class RayShards:
    """The shard applications of one index on a Ray cluster (``address`` None: a local instance)."""

    def __init__(
        self, config: RayServeConfig, settings: SearchSettings, *, address: str | None = None
    ) -> None:
        self.config = config
        self.settings = settings
        self.address = address
        self._started_ray = False
        self._source: Any = None
        self._stop = threading.Event()
        self._watch: threading.Thread | None = None
        self.seen: tuple[dict[int, dict[str, int]], list[dict[str, Any]]] = ({}, [])
        """The last replica states and nodes the watch read (``/healthz`` and metrics read this,
        never the cluster: a slow controller must not slow a health check)."""

    def connect(self) -> Any:
        ray = import_ray()
        if not ray.is_initialized():
            # The batch jobs' arguments: join ``address``, or a new local instance sized to the machine.
            ray.init(namespace=NAMESPACE, **JobEngine(engine="ray", address=self.address).init_args())
            self._started_ray = True
        return ray

    def start(self) -> list[list[RayShard]]:
        """Check placement, start the index source and every shard; the broker's backends."""
        ray = self.connect()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        check_placement(self.config, [n["Resources"] for n in ray.nodes() if n.get("Alive")])
        here = ray.get_runtime_context().get_node_id()
        self._source = (
            ray.remote(IndexSource)
            .options(
                name=SOURCE_NAME,
                namespace=NAMESPACE,
                get_if_exists=True,
                num_cpus=0,
                max_concurrency=8,
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
            )
            .remote(str(self.config.index.resolve()))
        )
        ray.get(self._source.published.remote())  # an index without a published generation fails here
        plan = serve_plan(self.config, self.settings)
        apply_plan(plan)
        ray.get(self._source.remember_plan.remote(plan))
        self.seen = (self.replica_states(), self.nodes())
        self._watch = threading.Thread(target=self._watching, name="ray-serve-watch", daemon=True)
        self._watch.start()
        return self.backends()

    def _watching(self, every_s: float = 2.0) -> None:
        while not self._stop.wait(every_s):
            try:
                self.seen = (self.replica_states(), self.nodes())
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                logger.warning("reading the Ray Serve status failed: %s", exc)

    def backends(self) -> list[list[RayShard]]:
        """Per shard, its handle, listed twice when it has replicas to hedge to (Serve picks
        the replica; a second call from the broker's hedge goes to the less busy one)."""
        from ray import serve

        shards = []
        for shard in range(self.config.shards):
            handle = serve.get_app_handle(app_name(shard))
            twice = 2 if self.config.replicas(shard).count > 1 else 1
            shards.append([RayShard(handle, shard) for _ in range(twice)])
        return shards

    def replica_states(self) -> dict[int, dict[str, int]]:
        """Per shard, its replicas by state (``RUNNING``, ``STARTING``, ``RECOVERING`` …)."""
        from ray import serve

        states: dict[int, dict[str, int]] = {}
        applications = serve.status().applications
        for shard in range(self.config.shards):
            app = applications.get(app_name(shard))
            if app is None:
                states[shard] = {}
                continue
            counts: Counter[str] = Counter()
            for deployment in app.deployments.values():
                counts.update({str(getattr(s, "value", s)): n for s, n in deployment.replica_states.items()})
            states[shard] = dict(counts)
        return states

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's nodes, alive or lost (``/healthz``)."""
        ray = import_ray()
        return [
            {"node": n["NodeID"][:16], "address": n.get("NodeManagerAddress"), "alive": bool(n.get("Alive"))}
            for n in ray.nodes()
        ]

    def close(self) -> None:
        """Delete the shard applications and the source; stop Ray if this process started it."""
        self._stop.set()
        ray = import_ray()
        if not ray.is_initialized():
            return
        serve: Any = import_module("ray.serve")

        for shard in range(self.config.shards):
            try:
                serve.delete(app_name(shard))
            except Exception as exc:  # noqa: BLE001 - shutting down: say it, go on
                logger.warning("could not delete %s: %s", app_name(shard), exc)
        if self._source is not None:
            ray.kill(self._source)
        if self._started_ray:
            serve.shutdown()
            ray.shutdown()
