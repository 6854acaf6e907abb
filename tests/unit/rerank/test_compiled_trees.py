"""Compiled trees on small real LightGBM models: bagged means, LightGBM's reading of tiny inputs."""

from __future__ import annotations

from pathlib import Path

import lightgbm as lgb
import numpy as np

from rerank.compiled_trees import ZERO_THRESHOLD, lightgbm_input, probe_rows
from rerank.features import SCHEMA
from rerank.ltr import LtrModel, predict_mean
from tests.unit.rerank.test_ltr import tiny_model


def test_a_bagged_model_saved_with_its_trees_scores_the_members_mean(tmp_path: Path) -> None:
    model = tiny_model(members=2)
    directory = model.save(tmp_path / "bagged", compile_trees=True)
    assert sorted(p.name for p in (directory / "compiled").glob("*.o")) == ["member-0.o", "member-1.o"]
    loaded = LtrModel.load(directory, scorer="compiled", cache_dir=tmp_path / "cache")
    assert loaded.compiled is not None
    rows = probe_rows([directory / "model.txt", directory / "model-1.txt"], len(SCHEMA))
    np.testing.assert_allclose(loaded.score(rows), predict_mean(model.boosters, rows), rtol=0, atol=1e-12)
    # Explanations stay LightGBM's SHAP values, which add up to the compiled score.
    contrib = loaded.contributions(rows)
    np.testing.assert_allclose(contrib.sum(axis=1), loaded.score(rows), rtol=0, atol=1e-9)


def test_tiny_inputs_meet_the_splits_as_zero_as_in_lightgbm(tmp_path: Path) -> None:
    """LightGBM reads |x| <= 1e-35 as 0.0 and puts zero-boundary splits at -1e-35: a compiled
    tree comparing -1e-36 itself would take the other branch."""
    rng = np.random.default_rng(0)
    x = rng.choice([-1.0, 0.0, 1.0], size=(400, 2))
    y = (x[:, 0] >= 0).astype(int) + (x[:, 1] > 0).astype(int)
    booster = lgb.train(
        {"objective": "regression", "verbosity": -1, "num_threads": 1, "min_data_in_leaf": 5},
        lgb.Dataset(x, label=y),
        num_boost_round=5,
    )
    assert "-1.0000000180025095e-35" in booster.model_to_string()  # the zero-boundary split
    path = LtrModel(boosters=(booster,), features=("bm25", "cosine"), card={"name": "zero"}).save(
        tmp_path / "zero", compile_trees=True
    )
    model = LtrModel.load(path, scorer="compiled", cache_dir=tmp_path / "cache")
    assert model.compiled is not None
    tiny = np.array([[-1e-36, 0.0], [-ZERO_THRESHOLD, 1e-40], [5e-324, -0.0], [-2e-35, 2e-35]])
    assert np.array_equal(model.score(tiny), booster.predict(tiny, num_threads=1))
    assert lightgbm_input(tiny).tolist() == [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [-2e-35, 2e-35]]


def test_probe_rows_take_every_value_from_the_splits(tmp_path: Path) -> None:
    """Each probe value is a split threshold, a double either side of one, NaN or zero."""
    model = tiny_model()
    rows = probe_rows([model.save(tmp_path / "m") / "model.txt"], len(SCHEMA))
    allowed: list[set[float]] = [{0.0} for _ in SCHEMA]

    def walk(node: dict[str, object]) -> None:
        if "split_index" in node:
            t = float(node["threshold"])  # type: ignore[arg-type]
            allowed[int(node["split_feature"])] |= {t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf)}  # type: ignore[call-overload]
            walk(node["left_child"])  # type: ignore[arg-type]
            walk(node["right_child"])  # type: ignore[arg-type]

    for tree in model.boosters[0].dump_model()["tree_info"]:
        walk(tree["tree_structure"])
    assert rows.shape == (512, len(SCHEMA)) and np.isnan(rows).any()
    for j in range(len(SCHEMA)):
        assert set(rows[~np.isnan(rows[:, j]), j].tolist()) <= allowed[j], SCHEMA[j]
