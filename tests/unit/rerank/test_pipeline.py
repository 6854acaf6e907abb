"""``serving_stages``: the app gets an ``ltr`` stage exactly when a model is configured."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ModelLoadError
from core.settings import RankSettings, Settings
from rerank.ltr import LtrStage
from rerank.pipeline import serving_stages
from tests.unit.rerank.test_ltr import tiny_model


def test_configured_model_is_served_with_feature_logging(tmp_path: Path) -> None:
    model_dir = tiny_model().save(tmp_path / "m")
    settings = Settings(
        rank=RankSettings(ltr_model=model_dir, feature_log_dir=tmp_path / "log", feature_log_rate=0.5)
    )
    stages = serving_stages(settings)
    assert list(stages) == ["ltr"]
    stage = stages["ltr"]
    assert isinstance(stage, LtrStage)
    assert stage.model.model_id == tiny_model().model_id
    assert stage.feature_log is not None and stage.feature_log.sample_rate == 0.5
    assert stage.needs_vector and stage.with_fields


def test_no_model_means_no_stage(tmp_path: Path) -> None:
    assert serving_stages(Settings(), bases=[tmp_path]) == {}


def test_the_default_model_directory_is_found(tmp_path: Path) -> None:
    tiny_model().save(tmp_path / "models" / "ltr" / "default")
    stage = serving_stages(Settings(), bases=[tmp_path / "elsewhere", tmp_path])["ltr"]
    assert isinstance(stage, LtrStage) and stage.feature_log is None


def test_a_broken_configured_model_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError):
        serving_stages(Settings(rank=RankSettings(ltr_model=tmp_path / "missing")))
