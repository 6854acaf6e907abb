"""Ranker configs as named, versioned objects declared in ``rankers.toml``.

An experiment must say exactly what it compared, months later: "bm25" is not enough
once its boosts change. A :class:`RankerConfig` pins the stages, parameters and model
ids behind a name, carries a version the author bumps on every change, and a content
digest that changes even when they forget. The CLI, the API and experiment
definitions all address rankers by this name; the file's format is on :class:`RankerCatalog`.

A name that is not declared but is registered in :mod:`training.rankers` still
resolves (version 0, no params), so a new ranker can be compared before it is
declared.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ConfigError
from online.toml_tables import named_tables, read_toml
from training.experiments import baselines as _baselines  # noqa: F401  (registers bm25-notitle)
from training.rankers import ranker_names

logger = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._+:-]{0,63}$")
STAGES: tuple[str, ...] = ("bm25", "rm3", "vector", "rrf", "fusion", "ltr", "cross-encoder")
_KEYS = frozenset({"version", "ranker", "stages", "params", "models", "description"})


@dataclass(frozen=True, slots=True)
class RankerConfig:
    """One ranker, pinned: what runs (``ranker``), through which stages, with what."""

    name: str
    version: int
    ranker: str
    """The registered runner in :mod:`training.rankers` that executes this config."""
    stages: tuple[str, ...] = ()
    params: tuple[tuple[str, str], ...] = ()
    """Sorted ``(key, value)`` pairs, passed to the runner as its options."""
    models: tuple[str, ...] = ()
    description: str = ""

    @property
    def key(self) -> str:
        """``name@vN``: what logs and reports record."""
        return f"{self.name}@v{self.version}"

    @property
    def options(self) -> dict[str, str]:
        return dict(self.params)

    @property
    def digest(self) -> str:
        """Changes whenever anything but the description changes."""
        raw = json.dumps(
            [self.name, self.version, self.ranker, self.stages, self.params, self.models], sort_keys=True
        )
        return hashlib.blake2b(raw.encode(), digest_size=6).hexdigest()


def parse_ranker(name: str, table: Mapping[str, Any], *, source: str = "rankers.toml") -> RankerConfig:
    """Validate one ``[rankers.NAME]`` table; errors name the file, the ranker and the field."""
    where = f"{source}: [rankers.{name!r}]"
    if not NAME_PATTERN.match(name):
        raise ConfigError(f"{where}: bad name; use lowercase letters, digits and . _ + : - (max 64).")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; expected: {', '.join(sorted(_KEYS))}."
        )
    version = table.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ConfigError(f"{where}: version must be an integer >= 1, got {version!r}.")
    ranker = table.get("ranker", name)
    if not isinstance(ranker, str) or not ranker:
        raise ConfigError(f"{where}: ranker must be a registered ranker name, got {ranker!r}.")
    stages = table.get("stages", [])
    if not isinstance(stages, list) or any(s not in STAGES for s in stages):
        raise ConfigError(f"{where}: stages must be a list drawn from {', '.join(STAGES)}; got {stages!r}.")
    params = table.get("params", {})
    if not isinstance(params, dict) or any(isinstance(v, (dict, list)) for v in params.values()):
        raise ConfigError(f"{where}: params must be a table of scalar values, got {params!r}.")
    models = table.get("models", [])
    if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
        raise ConfigError(f"{where}: models must be a list of model ids, got {models!r}.")
    description = table.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"{where}: description must be a string.")
    return RankerConfig(
        name=name,
        version=version,
        ranker=ranker,
        stages=tuple(stages),
        params=tuple(sorted((str(k), str(v)) for k, v in params.items())),
        models=tuple(models),
        description=description,
    )


@dataclass(frozen=True, slots=True)
class RankerCatalog:
    """The declared rankers, addressable by name.

    The file (repo root by default, ``settings.experiments.rankers_file``)::

        [rankers."ltr:v3"]
        version = 3
        ranker = "ltr"                    # the registered runner (training.rankers)
        stages = ["bm25", "vector", "ltr"]
        models = ["ltr-v3"]
        params = { model = "models/ltr-v3" }
        description = "LightGBM over the hybrid candidates."
    """

    configs: Mapping[str, RankerConfig]
    source: str = "rankers.toml"

    @classmethod
    def load(cls, path: Path) -> RankerCatalog:
        """Read and validate a TOML file; a missing file is an empty catalog."""
        path = Path(path)
        if not path.exists():
            logger.info("no ranker configs at %s; only registered rankers resolve", path)
            return cls({}, str(path))
        return cls.from_mapping(read_toml(path), source=str(path))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "rankers.toml") -> RankerCatalog:
        tables = named_tables(data, "rankers", source=source)
        configs = {name: parse_ranker(name, table, source=source) for name, table in tables.items()}
        return cls(configs, source)

    def names(self) -> list[str]:
        return sorted(self.configs)

    def get(self, name: str) -> RankerConfig:
        """The declared config, else an undeclared registered ranker at version 0."""
        if name in self.configs:
            return self.configs[name]
        registered = ranker_names()
        if name in registered:
            return RankerConfig(name=name, version=0, ranker=name)
        known = sorted(set(self.configs) | set(registered))
        raise ConfigError(
            f"Unknown ranker {name!r}; expected one of: {', '.join(known)} (see {self.source})."
        )

    def check_runnable(self, name: str) -> RankerConfig:
        """:meth:`get`, and fail now if its runner is not registered (before a long run starts)."""
        config = self.get(name)
        if config.ranker not in ranker_names():
            raise ConfigError(
                f"Ranker {name!r} ({self.source}) runs {config.ranker!r}, which is not registered; "
                f"registered: {', '.join(ranker_names())}."
            )
        return config
