"""The one file that says how shards are served on Ray Serve, read and checked before anything starts.

::

    index = "data/index"           # the index root, on the machine that runs `trawl serve`
    node_data = "/var/lib/trawl"   # each node's folder (TRAWL_NODE_DATA of its `ray start` wins)
    [replicas]                     # every shard, unless a [[shard]] table says otherwise
    count = 2
    num_cpus = 0.5
    resources = {}                 # Ray custom resources per replica, e.g. {big_memory = 1}
    [[shard]]                      # shard 1 otherwise
    id = 1
    count = 3

:func:`check_placement` runs before any deployment: Serve would leave an unplaceable replica pending.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from core.errors import ConfigError

__all__ = ["RayServeConfig", "ReplicaSpec", "check_placement", "load_config"]

DEFAULT_NODE_DATA = "~/.cache/trawl/node"


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    count: int = 1
    num_cpus: float = 0.5
    resources: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RayServeConfig:
    index: Path
    shards: int
    node_data: str = DEFAULT_NODE_DATA
    default: ReplicaSpec = ReplicaSpec()
    overrides: Mapping[int, ReplicaSpec] = field(default_factory=dict)

    def replicas(self, shard: int) -> ReplicaSpec:
        return self.overrides.get(shard, self.default)


def _spec(raw: Mapping[str, Any], base: ReplicaSpec, where: str) -> ReplicaSpec:
    unknown = set(raw) - {"id", "count", "num_cpus", "resources"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: count, num_cpus, resources."
        )
    try:
        count = int(raw.get("count", base.count))
        num_cpus = float(raw.get("num_cpus", base.num_cpus))
        resources = {str(k): float(v) for k, v in dict(raw.get("resources", base.resources)).items()}
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if count < 1 or num_cpus < 0 or any(v < 0 for v in resources.values()):
        raise ConfigError(f"{where}: count must be at least 1 and num_cpus and resources not negative.")
    return ReplicaSpec(count, num_cpus, resources)


def load_config(
    path: Path | None, *, index: Path | None = None, replicas: int | None = None
) -> RayServeConfig:
    """The config in ``path`` (None: defaults), ``index`` and ``replicas`` from the command line winning.

    The shard count comes from the index's serving generation, so the file cannot disagree with it.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"Cannot read the Ray Serve config {path}: {exc}") from None
    unknown = set(raw) - {"index", "node_data", "replicas", "shard"}
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {', '.join(sorted(unknown))}; known: index, node_data, replicas, shard."
        )
    root = index or (Path(raw["index"]) if "index" in raw else None)
    if root is None:
        raise ConfigError("Say which index to serve: --index, or `index = ...` in the config file.")
    from retrieval.index.manifest import IndexManifest  # lazy: tantivy; the CLI's help stays fast
    from retrieval.index.root import resolve_index

    try:
        shards = IndexManifest.load(resolve_index(root)).shards
    except Exception as exc:  # noqa: BLE001 - said as one line: no index there
        raise ConfigError(f"Cannot serve {root}: {exc}") from None
    default = _spec(raw.get("replicas", {}), ReplicaSpec(), "[replicas]")
    if replicas is not None:
        default = replace(default, count=replicas)
    overrides: dict[int, ReplicaSpec] = {}
    for entry in raw.get("shard", []):
        shard = entry.get("id")
        if not isinstance(shard, int) or not 0 <= shard < shards:
            raise ConfigError(f"[[shard]] id {shard!r}: the index at {root} has shards 0 to {shards - 1}.")
        overrides[shard] = _spec(entry, default, f"[[shard]] id = {shard}")
    return RayServeConfig(
        Path(root), shards, str(raw.get("node_data", DEFAULT_NODE_DATA)), default, overrides
    )


def check_placement(config: RayServeConfig, nodes: Sequence[Mapping[str, float]]) -> None:
    """Raise a ConfigError naming the first shard whose replicas the nodes cannot hold.

    ``nodes``: each live node's total resources (``CPU`` and custom ones). Replicas are
    placed greedily, largest first, as a check that a placement exists, not the one Ray makes.
    """
    free = [dict(n) for n in nodes]
    wanted = sorted(
        ((config.replicas(s), s) for s in range(config.shards)),
        key=lambda item: -item[0].num_cpus,
    )
    for spec, shard in wanted:
        needs = {"CPU": spec.num_cpus, **spec.resources}
        for _ in range(spec.count):
            node = next((n for n in free if all(n.get(k, 0.0) + 1e-9 >= v for k, v in needs.items())), None)
            if node is None:
                have = ", ".join(
                    "{"
                    + ", ".join(f"{k}: {v:g}" for k, v in sorted(n.items()) if not k.startswith("node:"))
                    + "}"
                    for n in nodes
                )
                raise ConfigError(
                    f"Shard {shard} cannot be placed: its {spec.count} replica(s) need "
                    f"{', '.join(f'{k} {v:g}' for k, v in needs.items())} each, and the cluster's nodes "
                    f"have {have or 'nothing'} in all. Lower count, num_cpus or resources, or add a node."
                )
            for k, v in needs.items():
                node[k] = node.get(k, 0.0) - v
