"""The packaged model's compiled trees score what LightGBM scores, on real served candidates.

Cranfield is indexed (lexical only) and its 225 queries are served through the ``ltr``
stage, 100 candidates each, with the packaged model loaded as serving loads it
(``scorer="compiled"``) and every scored row logged. The compiled scores equal LightGBM's on
every logged candidate; a second load reuses the cached artefact; a model saved by
``trawl train ltr`` ships its own; and a damaged artefact, trees that score differently or
a missing backend each cost one warning and never a different score.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from numpy.typing import NDArray

from core.settings import SearchSettings
from rerank.compiled_trees import RECORD_FILE, build_artefact
from rerank.feature_log import FeatureLogger, read_feature_log
from rerank.features import SCHEMA
from rerank.ltr import COMPILED_DIR, LtrModel, LtrStage, predict_mean
from rerank.pipeline import default_model_dir
from retrieval.index.build import build_index
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from training.datasets import BeirDataset

QUERIES = 225
DEPTH = 100


@dataclass(frozen=True)
class Served:
    model: LtrModel
    rows: pl.DataFrame
    """Every candidate the stage scored: query, doc_id, the compiled score, all features."""
    values: NDArray[np.float64]
    """The rows' model columns, in the model's order."""
    cache: Path
    explained: list[dict[str, float]]


@pytest.fixture(scope="module")
def served(eval_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Served:
    root = tmp_path_factory.mktemp("compiled-trees")
    dataset = BeirDataset.open(eval_dir / "cranfield")
    build_index(dataset.iter_documents(), root / "index", shards=1)
    model_dir = default_model_dir()
    assert model_dir is not None
    model = LtrModel.load(model_dir, scorer="compiled", cache_dir=root / "trees")
    log = FeatureLogger(root / "features", sample_rate=1.0)
    # A lexical-only index: the stage ranks the page's depth of lexical candidates, so a
    # page of 100 scores as many as serving's candidate_k (100) with vectors.
    service = SearchService.open(
        root / "index",
        SearchSettings(max_page_size=DEPTH),
        stages={"ltr": LtrStage(model, needs_vector=False, feature_log=log)},
    )
    try:
        texts = list(dataset.queries().values())[:QUERIES]
        for text in texts:
            assert service.search(SearchRequest(text, ranker="ltr", size=DEPTH)).hits
        response = service.search(SearchRequest(texts[0], ranker="ltr", size=10, explain=True))
        explained = [
            {
                "score": hit.score,
                "parts": hit.explain["ltr"]["bias"] + sum(hit.explain["ltr"]["contributions"].values()),
            }
            for hit in response.hits
            if hit.explain is not None
        ]
    finally:
        service.close()
    log.flush()
    rows = read_feature_log(root / "features")
    values = model.model_values(rows.select(SCHEMA).to_numpy().astype(np.float64))
    return Served(model, rows, values, root / "trees", explained)


def lightgbm(model: LtrModel, values: NDArray[np.float64]) -> NDArray[np.float64]:
    return predict_mean(model.boosters, values)


def order(scores: NDArray[np.float64], doc_ids: NDArray[np.uint64]) -> list[int]:
    """Documents as the stage orders them: score descending, then doc id."""
    return [int(d) for _, d in sorted(zip(-scores, doc_ids, strict=True))]


def only_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_compiled_scores_equal_lightgbm_on_every_served_candidate(served: Served) -> None:
    assert served.model.compiled is not None
    assert served.rows["query"].n_unique() == QUERIES
    assert served.rows.height > 0.9 * QUERIES * DEPTH  # the lexical top 100 of nearly every query
    compiled = served.rows["score"].to_numpy()
    reference = lightgbm(served.model, served.values)
    np.testing.assert_allclose(compiled, reference, rtol=0, atol=1e-5)
    ids = served.rows["doc_id"].to_numpy()
    for query in served.rows["query"].unique():
        mask = (served.rows["query"] == query).to_numpy()
        assert order(compiled[mask], ids[mask]) == order(reference[mask], ids[mask]), query
    # The explain page's parts (LightGBM SHAP values) still add up to the served score.
    assert len(served.explained) == 10
    for hit in served.explained:
        assert hit["parts"] == pytest.approx(hit["score"], abs=1e-9)


def test_a_second_load_reuses_the_cached_artefact(served: Served, caplog: pytest.LogCaptureFixture) -> None:
    first = served.model.compiled
    assert first is not None
    objects = sorted(first.directory.glob("member-*.o"))
    assert [p.name for p in objects] == ["member-0.o"] and first.directory.parent == served.cache
    mtimes = [p.stat().st_mtime_ns for p in objects]
    caplog.set_level(logging.INFO, logger="rerank.compiled_trees")
    again = LtrModel.load(default_model_dir() or Path(), scorer="compiled", cache_dir=served.cache)
    assert again.compiled is not None and again.compiled.directory == first.directory
    assert not [r for r in caplog.records if r.getMessage().startswith("compiled ")]  # nothing rebuilt
    assert [p.stat().st_mtime_ns for p in objects] == mtimes
    assert np.array_equal(again.score(served.values), served.model.score(served.values))


def test_a_model_saved_by_training_ships_its_compiled_trees(served: Served, tmp_path: Path) -> None:
    """``trawl train ltr`` saves with ``compile_trees``: the card records the artefact and a
    server loads it from the model directory, compiling and caching nothing."""
    directory = served.model.save(tmp_path / "model", compile_trees=True)
    card = json.loads((directory / "card.json").read_text())
    record = card["compiled"]
    assert record["backend"] == "lleaves"
    assert record["versions"] == {
        "lleaves": metadata.version("lleaves"),
        "llvmlite": metadata.version("llvmlite"),
    }
    assert record["model_id"] == served.model.model_id
    obj = directory / COMPILED_DIR / "member-0.o"
    assert record["files"] == {"member-0.o": hashlib.sha256(obj.read_bytes()).hexdigest()}
    loaded = LtrModel.load(directory, scorer="compiled", cache_dir=tmp_path / "cache")
    assert loaded.compiled is not None and loaded.compiled.directory == directory / COMPILED_DIR
    assert not (tmp_path / "cache").exists()
    np.testing.assert_allclose(
        loaded.score(served.values), lightgbm(loaded, served.values), rtol=0, atol=1e-5
    )
    # Saved again without compiling, the card no longer claims an artefact.
    plain = loaded.save(tmp_path / "plain")
    assert "compiled" not in json.loads((plain / "card.json").read_text())


def _copy_cache(served: Served, tmp_path: Path) -> Path:
    assert served.model.compiled is not None
    cache = tmp_path / "trees"
    shutil.copytree(served.model.compiled.directory, cache / served.model.compiled.directory.name)
    return cache / served.model.compiled.directory.name


def test_a_damaged_artefact_is_rebuilt_never_handed_to_llvm(
    served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """LLVM aborts the process on an object file it cannot read: a damaged one must be caught
    by its hash first (this test would die, not fail, otherwise)."""
    entry = _copy_cache(served, tmp_path)
    (entry / "member-0.o").write_bytes(b"not an object file" * 100)
    model = LtrModel.load(default_model_dir() or Path(), scorer="compiled", cache_dir=entry.parent)
    assert (
        len(only_warnings(caplog)) == 1 and "does not match its recorded SHA-256" in only_warnings(caplog)[0]
    )
    assert model.compiled is not None and model.compiled.directory == entry
    np.testing.assert_allclose(model.score(served.values), lightgbm(model, served.values), rtol=0, atol=1e-5)


def test_trees_that_score_differently_fall_back_to_lightgbm(
    served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An artefact whose record is intact but whose code is another model's (the first
    tree's leaves moved by 0.5) loads, fails the self-check, and LightGBM scores instead."""
    model_dir = default_model_dir()
    assert model_dir is not None
    text = (model_dir / "model.txt").read_text()
    first_leaves = next(line for line in text.splitlines() if line.startswith("leaf_value="))
    moved = "leaf_value=" + " ".join(str(float(v) + 0.5) for v in first_leaves.split("=", 1)[1].split())
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.txt").write_text(text.replace(first_leaves, moved, 1))
    build_artefact(tmp_path / "other-compiled", [other / "model.txt"], model_id="other")
    entry = _copy_cache(served, tmp_path)
    shutil.copy(tmp_path / "other-compiled" / "member-0.o", entry / "member-0.o")
    record = json.loads((entry / RECORD_FILE).read_text())
    record["files"]["member-0.o"] = hashlib.sha256((entry / "member-0.o").read_bytes()).hexdigest()
    (entry / RECORD_FILE).write_text(json.dumps(record))

    model = LtrModel.load(model_dir, scorer="compiled", cache_dir=entry.parent)
    warnings = only_warnings(caplog)
    assert len(warnings) == 1 and "differ from LightGBM" in warnings[0], warnings
    assert model.compiled is None
    assert np.array_equal(model.score(served.values), lightgbm(model, served.values))


def test_without_the_backend_the_model_scores_with_lightgbm(
    served: Served, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "lleaves", None)  # what `import lleaves` meets when it is not installed
    model = LtrModel.load(default_model_dir() or Path(), scorer="compiled", cache_dir=tmp_path / "trees")
    warnings = only_warnings(caplog)
    assert len(warnings) == 1 and "the lleaves package is not installed" in warnings[0], warnings
    assert model.compiled is None and not (tmp_path / "trees").exists()
    assert np.array_equal(model.score(served.values), lightgbm(model, served.values))
