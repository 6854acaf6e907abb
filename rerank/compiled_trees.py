"""The LTR model's trees compiled to machine code by lleaves: what serving scores with.

Why: for 100 candidates LightGBM's ``predict`` spends most of its time on per-call work
(checking and converting the input, setting up a predictor), not on the trees; lleaves makes
each tree native branches behind one C call. Chosen over onnxmltools + ONNX Runtime by
measurement (``bench/bench_tree_scoring.py``, docs/DECISIONS.md), and exact: it compares in
float64 as LightGBM does, where ONNX's tree operator compares float32.

An artefact is a directory of ``member-<i>.o`` (one per booster of a bagged model) and a
record: backend, recipe, package versions, target, model id, each file's SHA-256. It ships in
the model directory (``trawl train ltr``; the card's ``compiled``) or is built at the first
load into a cache keyed by model id and compiler. A wrong artefact costs speed, never
results or the server: files are hashed before LLVM sees them (it aborts the process on a
bad one), and loaded trees must match LightGBM on probe rows (:func:`self_check`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import lightgbm as lgb
import numpy as np
from numpy.typing import NDArray

from core.atomic import staging_dir, write_text
from core.dirlock import DirLock
from core.errors import DirectoryBusy, ModelLoadError

__all__ = ["CompiledTrees", "build_artefact", "default_cache_dir", "open_compiled"]

logger = logging.getLogger(__name__)

BACKEND = "lleaves"
RECIPE = 1
"""Version of how trees are compiled and recorded here: an artefact of another recipe is rebuilt."""
RECORD_FILE = "compiled.json"
SELF_CHECK_ABS = 1e-9
"""Float64 code agrees with LightGBM to rounding of the sum (about 1e-14); one branch taken
the other way moves a score by a leaf value, orders of magnitude more."""
PROBE_ROWS = 512
LOCK_WAIT_S = 300.0
"""How long a process waits for another one compiling the same model (a few seconds each)."""
ZERO_THRESHOLD = float(np.float32(1e-35))
"""LightGBM's ``kZeroThreshold``: its predict reads any input of magnitude up to this as 0.0."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/trawl/trees`` (``~/.cache/trawl/trees``): shared by every data directory."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "trawl" / "trees"


def member_object(index: int) -> str:
    return f"member-{index}.o"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sources(model_files: Sequence[Path]) -> dict[str, str]:
    """The member files' SHA-256 by name: an artefact is of these exact trees (a card's model
    id would not notice a ``model.txt`` replaced by hand)."""
    return {Path(f).name: _sha256(Path(f)) for f in model_files}


def _target() -> dict[str, str]:
    """What the code is compiled for. On x86-64, the portable x86-64 baseline: the artefact a
    training machine writes runs on any x86-64 server (measured as fast as code for this CPU
    in bench/results/tree-scoring.md). Elsewhere, this CPU and its features."""
    import llvmlite.binding as llvm  # lazy: LLVM loads only where trees are compiled

    triple = llvm.get_process_triple()
    if triple.startswith("x86_64"):
        return {"triple": triple, "cpu": "x86-64", "features": ""}
    return {
        "triple": triple,
        "cpu": llvm.get_host_cpu_name(),
        "features": llvm.get_host_cpu_features().flatten(),
    }


def compiler_record() -> dict[str, Any]:
    """Backend, recipe, package versions and target: what an artefact must match to be loaded.

    Raises :class:`ImportError` when lleaves or llvmlite is not installed."""
    import lleaves  # noqa: F401 # lazy: and the backend must import, not just be listed

    return {
        "backend": BACKEND,
        "recipe": RECIPE,
        "versions": {name: metadata.version(name) for name in ("lleaves", "llvmlite")},
        "target": _target(),
    }


def _cache_entry(cache_dir: Path, model_id: str, compiler: Mapping[str, Any]) -> Path:
    key = hashlib.blake2b(json.dumps(compiler, sort_keys=True).encode(), digest_size=6).hexdigest()
    return Path(cache_dir) / f"{model_id}-{key}"


class CompiledTrees:
    """A model's members as compiled forests; :meth:`predict` is ``rerank.ltr.predict_mean``'s
    float64 mean, member by member in the same order.

    ``record`` is what the card stores; ``directory`` where the objects were loaded from."""

    def __init__(self, forests: Sequence[Any], *, record: Mapping[str, Any], directory: Path) -> None:
        self._forests = tuple(forests)
        self.record = dict(record)
        self.directory = Path(directory)

    def predict(self, values: NDArray[np.float64]) -> NDArray[np.float64]:
        """Scores of ``values`` (the model's own columns), one thread: a request is one query."""
        values = lightgbm_input(values)
        total = np.asarray(self._forests[0].predict(values, n_jobs=1), dtype=np.float64)
        for forest in self._forests[1:]:
            total = total + np.asarray(forest.predict(values, n_jobs=1), dtype=np.float64)
        return total / len(self._forests) if len(self._forests) > 1 else total


def lightgbm_input(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """``values`` as LightGBM's predict sees them: magnitudes up to :data:`ZERO_THRESHOLD` are 0.0.

    LightGBM drops such values when it reads a dense row (``c_api.cpp``, row functions), so
    they meet a split as zero; compiled trees compare the value itself. A split at
    -1e-35 (LightGBM's threshold for "below zero") then went the other way: the self-check's
    probe rows found it, by 0.06 on one score of the packaged model."""
    values = np.ascontiguousarray(values, dtype=np.float64)
    tiny = np.abs(values) <= ZERO_THRESHOLD
    return np.where(tiny, 0.0, values) if tiny.any() else values


def build_artefact(directory: Path, model_files: Sequence[Path], *, model_id: str) -> dict[str, Any]:
    """Compile every member into ``directory`` (staged, then renamed into place); returns its record.

    Raises whatever lleaves or LLVM raise: callers decide whether that is fatal."""
    compiler = compiler_record()
    target = compiler["target"]
    started = time.perf_counter()
    with staging_dir(directory) as tmp:
        for i, model_file in enumerate(model_files):
            _forest(model_file, tmp / member_object(i), target)  # compiles, writes the object file
        files = {member_object(i): _sha256(tmp / member_object(i)) for i in range(len(model_files))}
        record = compiler | {
            "model_id": model_id,
            "sources": _sources(model_files),
            "files": files,
            "compile_seconds": round(time.perf_counter() - started, 2),
        }
        write_text(tmp / RECORD_FILE, json.dumps(record, indent=2, sort_keys=True) + "\n")
    logger.info(
        "compiled %s (%d members) in %.1f s: %s",
        model_id,
        len(model_files),
        record["compile_seconds"],
        directory,
    )
    return record


def _mismatch(
    directory: Path,
    record: Mapping[str, Any],
    compiler: Mapping[str, Any],
    *,
    model_id: str,
    model_files: Sequence[Path],
) -> str | None:
    """Why ``directory`` cannot be loaded under ``record`` here, or None when it can."""
    for key in ("backend", "recipe", "versions", "target"):
        if record.get(key) != compiler[key]:
            return f"{key} {record.get(key)!r}, this process has {compiler[key]!r}"
    if record.get("model_id") != model_id or record.get("sources") != _sources(model_files):
        return f"compiled from other model files ({record.get('model_id')!r}), not those of {model_id!r}"
    files = record.get("files")
    wanted = [member_object(i) for i in range(len(model_files))]
    if not isinstance(files, dict) or sorted(files) != sorted(wanted):
        return f"records files {sorted(files) if isinstance(files, dict) else files!r}, expected {wanted}"
    for name in wanted:
        path = directory / name
        if not path.is_file():
            return f"{name} is missing"
        if _sha256(path) != files[name]:
            return f"{name} does not match its recorded SHA-256"
    return None


def _load(directory: Path, model_files: Sequence[Path], record: Mapping[str, Any]) -> CompiledTrees:
    """Hand the verified objects to LLVM: lleaves loads a cached object instead of compiling."""
    forests = [
        _forest(model_file, directory / member_object(i), record["target"])
        for i, model_file in enumerate(model_files)
    ]
    return CompiledTrees(forests, record=record, directory=directory)


def _forest(model_file: Path, obj: Path, target: Mapping[str, str]) -> Any:
    """One member as lleaves code: compiled and written to ``obj``, or loaded from ``obj``
    when it exists (lleaves' object cache checks nothing: :func:`_mismatch` did)."""
    import lleaves  # lazy: LLVM loads only where trees are compiled

    forest = lleaves.Model(str(model_file))
    forest.compile(cache=str(obj), target_cpu=target["cpu"], target_cpu_features=target["features"])
    return forest


_SPLIT_FEATURE = re.compile(r"^split_feature=(.*)$", re.M)
_THRESHOLD = re.compile(r"^threshold=(.*)$", re.M)


def probe_rows(
    model_files: Sequence[Path], features: int, *, rows: int = PROBE_ROWS, seed: int = 0
) -> NDArray[np.float64]:
    """Rows whose every value is one a split compares against: a threshold itself (where ``<=``
    decides), the doubles either side of it, NaN (missing) or zero (LightGBM's missing for
    ``missing_type=None``). Any branch compiled the other way shows up as a score difference."""
    thresholds: list[set[float]] = [set() for _ in range(features)]
    for model_file in model_files:
        text = Path(model_file).read_text()
        for feats, values in zip(_SPLIT_FEATURE.findall(text), _THRESHOLD.findall(text), strict=True):
            for f, t in zip(feats.split(), values.split(), strict=True):
                thresholds[int(f)].add(float(t))
    rng = np.random.default_rng(seed)
    out = np.empty((rows, features), dtype=np.float64)
    for j, found in enumerate(thresholds):
        t = np.asarray(sorted(found) or [0.0])
        choices = np.concatenate([t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf), [np.nan, 0.0]])
        out[:, j] = rng.choice(choices, size=rows)
    return out


def self_check(compiled: CompiledTrees, boosters: Sequence[lgb.Booster], model_files: Sequence[Path]) -> None:
    """Refuse compiled trees that score any probe row differently from LightGBM."""
    probe = probe_rows(model_files, boosters[0].num_feature())
    reference = sum(np.asarray(b.predict(probe, num_threads=1), dtype=np.float64) for b in boosters) / len(
        boosters
    )
    worst = float(np.max(np.abs(compiled.predict(probe) - reference)))
    if not worst <= SELF_CHECK_ABS:
        raise ModelLoadError(
            str(compiled.directory),
            f"compiled trees differ from LightGBM by {worst:.3g} on the probe rows "
            f"(allowed {SELF_CHECK_ABS:g}); delete the directory to rebuild it, "
            "or set rank.ltr_scorer=lightgbm",
        )


def open_compiled(
    boosters: Sequence[lgb.Booster],
    model_files: Sequence[Path],
    *,
    model_id: str,
    shipped: tuple[Path, Mapping[str, Any]] | None,
    cache_dir: Path,
) -> CompiledTrees:
    """The model's compiled trees: the artefact shipped in its directory (``(path, card record)``)
    when it matches this process, else the cache entry, built now if missing or damaged.

    Raises :class:`ModelLoadError` when none can be had (backend missing, compilation failed,
    another process compiling for longer than :data:`LOCK_WAIT_S`, self-check failed): the
    caller then scores with LightGBM."""
    where = str(Path(model_files[0]).parent)
    try:
        compiler = compiler_record()
    except ImportError as exc:
        raise ModelLoadError(where, f"the {BACKEND} package is not installed ({exc})") from exc
    try:
        return _open(boosters, model_files, compiler, model_id=model_id, shipped=shipped, cache_dir=cache_dir)
    except ModelLoadError:
        raise
    except DirectoryBusy as exc:
        raise ModelLoadError(where, str(exc)) from exc
    except Exception as exc:  # noqa: BLE001 - lleaves and LLVM fail with whatever came up
        # (an llvmlite without the legacy pass manager: AttributeError)
        raise ModelLoadError(where, f"no compiled trees ({BACKEND}): {type(exc).__name__}: {exc}") from exc


def _open(
    boosters: Sequence[lgb.Booster],
    model_files: Sequence[Path],
    compiler: Mapping[str, Any],
    *,
    model_id: str,
    shipped: tuple[Path, Mapping[str, Any]] | None,
    cache_dir: Path,
) -> CompiledTrees:
    if shipped is not None:
        directory, record = shipped
        why = _mismatch(directory, record, compiler, model_id=model_id, model_files=model_files)
        if why is None:
            compiled = _load(directory, model_files, record)
            self_check(compiled, boosters, model_files)
            return compiled
        logger.info("not loading the compiled trees in %s (%s): using the cache", directory, why)
    entry = _cache_entry(cache_dir, model_id, compiler)
    lock = DirLock(entry.with_name(f".{entry.name}.lock"), what=f"compiled trees {entry}")
    with lock.held(wait_s=LOCK_WAIT_S):
        record = _read_record(entry)
        why = (
            _mismatch(entry, record, compiler, model_id=model_id, model_files=model_files)
            if record
            else "not built yet"
        )
        if why is not None:
            if entry.exists():
                logger.warning("compiled trees in %s are unusable (%s): rebuilding them", entry, why)
            record = build_artefact(entry, model_files, model_id=model_id)
        compiled = _load(entry, model_files, record)  # under the lock: no rebuild swaps the files meanwhile
    self_check(compiled, boosters, model_files)
    return compiled


def _read_record(directory: Path) -> dict[str, Any]:
    """An artefact directory's record; empty when there is none or it is not JSON."""
    try:
        record = json.loads((directory / RECORD_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
