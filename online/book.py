"""Online experiment definitions and deterministic, sticky bucketing.

Experiments are declared in ``experiments.toml`` (``settings.experiments.experiments_file``;
the format is in :meth:`ExperimentBook.load`). Bucketing hashes ``salt + unit id``
(blake2b, 64 bits), so a user lands in the same bucket on every request, on every
server and after every restart, with no state to store. Enrolment uses an independent
hash, so ramping ``traffic`` up never moves an enrolled user to another variant. At
most one experiment may be active at any moment: overlapping windows are a
configuration error, which keeps every impression attributable to a single experiment.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from core.errors import ConfigError
from online.toml_tables import named_tables, read_toml

logger = logging.getLogger(__name__)

Mode = Literal["ab", "interleave"]
MODES: tuple[str, ...] = ("ab", "interleave")
INTERLEAVED = "interleaved"
"""The variant name impressions of an interleaving experiment carry."""
NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_KEYS = frozenset({"mode", "salt", "start", "stop", "traffic", "variants", "description"})


def unit_hash(salt: str, purpose: str, unit_id: str) -> float:
    """A uniform number in [0, 1) fixed by (salt, purpose, unit id)."""
    digest = hashlib.blake2b(f"{salt}\x1f{purpose}\x1f{unit_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    ranker: str
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class Assignment:
    """What one request gets: the experiment, its variant and the ranker(s) to run."""

    experiment: str
    mode: Mode
    variant: str
    rankers: tuple[str, ...]
    """One ranker for A/B; (A, B) for interleaving."""


@dataclass(frozen=True, slots=True)
class Experiment:
    name: str
    mode: Mode
    variants: tuple[Variant, ...]
    salt: str
    start: datetime | None = None
    stop: datetime | None = None
    traffic: float = 1.0
    description: str = ""

    def is_active(self, now: datetime) -> bool:
        return (self.start is None or now >= self.start) and (self.stop is None or now < self.stop)

    @property
    def weights(self) -> tuple[float, ...]:
        total = sum(v.weight for v in self.variants)
        return tuple(v.weight / total for v in self.variants)

    def bucket(self, unit_id: str) -> Variant | None:
        """The variant of ``unit_id``, or None when it is not enrolled (``traffic`` < 1)."""
        if self.traffic < 1.0 and unit_hash(self.salt, "enrol", unit_id) >= self.traffic:
            return None
        u = unit_hash(self.salt, "variant", unit_id)
        cumulative = 0.0
        for variant, w in zip(self.variants, self.weights, strict=True):
            cumulative += w
            if u < cumulative:
                return variant
        return self.variants[-1]  # u within float rounding of 1.0

    def assign(self, unit_id: str) -> Assignment | None:
        variant = self.bucket(unit_id)
        if variant is None:
            return None
        if self.mode == "interleave":
            return Assignment(self.name, "interleave", INTERLEAVED, tuple(v.ranker for v in self.variants))
        return Assignment(self.name, "ab", variant.name, (variant.ranker,))


def _time(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise ConfigError(f"{where} must be a TOML date-time (e.g. 2026-11-01T00:00:00Z), got {value!r}.")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def parse_experiment(name: str, table: Mapping[str, Any], *, source: str = "experiments.toml") -> Experiment:
    """Validate one ``[experiments.NAME]`` table; errors name the file, experiment and field."""
    where = f"{source}: [experiments.{name}]"
    if not NAME.match(name):
        raise ConfigError(f"{where}: bad name; use lowercase letters, digits and . _ - (max 64).")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(unknown)}; expected: {', '.join(sorted(_KEYS))}."
        )
    mode = table.get("mode", "ab")
    if mode not in MODES:
        raise ConfigError(f"{where}: mode must be one of {', '.join(MODES)}, got {mode!r}.")
    salt = table.get("salt")
    if not isinstance(salt, str) or not salt:
        raise ConfigError(f"{where}: salt must be a non-empty string (it decides who is in which bucket).")
    traffic = table.get("traffic", 1.0)
    if not isinstance(traffic, (int, float)) or isinstance(traffic, bool) or not 0 < traffic <= 1:
        raise ConfigError(f"{where}: traffic must be in (0, 1], got {traffic!r}.")
    raw_variants = table.get("variants")
    if not isinstance(raw_variants, list) or len(raw_variants) < 2:
        raise ConfigError(f"{where}: variants must list at least two {{name, ranker, weight}} tables.")
    variants: list[Variant] = []
    for i, v in enumerate(raw_variants):
        if not isinstance(v, dict) or set(v) - {"name", "ranker", "weight"}:
            raise ConfigError(f"{where}: variants[{i}] must be a table with name, ranker and weight.")
        vname, ranker, weight = v.get("name"), v.get("ranker"), v.get("weight", 1.0)
        if not isinstance(vname, str) or not NAME.match(vname) or vname == INTERLEAVED:
            raise ConfigError(f"{where}: variants[{i}].name {vname!r} is not a valid variant name.")
        if not isinstance(ranker, str) or not ranker:
            raise ConfigError(f"{where}: variants[{i}].ranker must name a ranker.")
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight <= 0:
            raise ConfigError(f"{where}: variants[{i}].weight must be > 0, got {weight!r}.")
        variants.append(Variant(vname, ranker, float(weight)))
    if len({v.name for v in variants}) != len(variants):
        raise ConfigError(f"{where}: variant names must be unique.")
    if mode == "interleave" and len(variants) != 2:
        raise ConfigError(
            f"{where}: interleaving compares exactly two variants (A then B), got {len(variants)}."
        )
    start, stop = _time(table.get("start"), f"{where}: start"), _time(table.get("stop"), f"{where}: stop")
    if start is not None and stop is not None and stop <= start:
        raise ConfigError(f"{where}: stop ({stop.isoformat()}) must be after start ({start.isoformat()}).")
    description = table.get("description", "")
    return Experiment(name, mode, tuple(variants), salt, start, stop, float(traffic), str(description))


def _overlap(a: Experiment, b: Experiment) -> bool:
    lo = max(a.start or datetime.min.replace(tzinfo=UTC), b.start or datetime.min.replace(tzinfo=UTC))
    hi = min(a.stop or datetime.max.replace(tzinfo=UTC), b.stop or datetime.max.replace(tzinfo=UTC))
    return lo < hi


@dataclass(frozen=True, slots=True)
class ExperimentBook:
    """Every declared experiment; answers "which experiment and variant is this request in?"."""

    experiments: Mapping[str, Experiment]
    source: str = "experiments.toml"

    @classmethod
    def load(cls, path: Path) -> ExperimentBook:
        """Read and validate the file; a missing file means no experiments (the default).

        One table per experiment::

            [experiments.title-boost]
            mode = "ab"                       # or "interleave" (exactly two variants: A then B)
            salt = "title-boost-2026-11"      # change it to reshuffle users for a new experiment
            start = 2026-11-01T00:00:00Z      # optional; naive times are UTC
            stop = 2026-12-01T00:00:00Z       # optional, exclusive
            traffic = 1.0                     # share of users enrolled
            variants = [
              { name = "control", ranker = "bm25", weight = 0.5 },
              { name = "notitle", ranker = "bm25-notitle", weight = 0.5 },
            ]
        """
        path = Path(path)
        if not path.exists():
            return cls({}, str(path))
        return cls.from_mapping(read_toml(path), source=str(path))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, source: str = "experiments.toml") -> ExperimentBook:
        tables = named_tables(data, "experiments", source=source)
        found = [parse_experiment(n, t, source=source) for n, t in tables.items()]
        for i, a in enumerate(found):
            for b in found[i + 1 :]:
                if _overlap(a, b):
                    raise ConfigError(
                        f"{source}: experiments {a.name!r} and {b.name!r} overlap in time; "
                        "give them disjoint start/stop windows (one experiment at a time)."
                    )
        return cls({e.name: e for e in found}, source)

    def get(self, name: str) -> Experiment:
        if name not in self.experiments:
            known = ", ".join(sorted(self.experiments)) or "none declared"
            raise ConfigError(f"Unknown experiment {name!r} in {self.source}; expected one of: {known}.")
        return self.experiments[name]

    def active(self, now: datetime) -> Experiment | None:
        for experiment in self.experiments.values():
            if experiment.is_active(now):
                return experiment
        return None

    def assign(self, unit_id: str | None, now: datetime | None = None) -> Assignment | None:
        """The request's assignment; None without a unit id, an active experiment or enrolment."""
        if not unit_id:
            return None
        experiment = self.active(now or datetime.now(UTC))
        return experiment.assign(unit_id) if experiment is not None else None

    def rankers(self, now: datetime | None = None) -> Sequence[str]:
        """Every ranker name the experiments use (to check them against the catalog at start-up).

        With ``now``, only those of experiments not finished by then: a finished one stays
        declared for its report, and its rankers may have been retired since.
        """
        return sorted(
            {
                v.ranker
                for e in self.experiments.values()
                if now is None or e.stop is None or now < e.stop
                for v in e.variants
            }
        )
