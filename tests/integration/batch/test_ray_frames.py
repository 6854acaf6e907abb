"""Feature frames on Ray: per-query tasks give the local frame, cached where `trawl train ltr` reads it."""

from __future__ import annotations

import itertools
from pathlib import Path
from types import ModuleType

import pytest
from polars.testing import assert_frame_equal

from core.settings import Settings
from training.datasets import BeirDataset
from training.evaluate import parse_queries
from training.frames import collection_frame
from training.ray_training import ray_collection_frame

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow  # frame workers load the encoder and the cached cranfield index


@pytest.mark.timeout(1200)  # a fresh clone builds and embeds the cranfield index first
def test_ray_frame_is_the_local_frame(eval_dir: Path, ray_local: ModuleType) -> None:
    cranfield = eval_dir / "cranfield"
    texts = dict(itertools.islice(BeirDataset.open(cranfield).judged_queries().items(), 12))
    queries = parse_queries(texts)
    settings = Settings(data_dir=REPO / "data")
    path, frame = ray_collection_frame(
        cranfield, settings, queries=queries, depth=20, actors=2, queries_per_task=3
    )
    try:
        assert frame.height > 0 and frame["qid"].unique(maintain_order=True).to_list() == list(queries)
        cached = collection_frame(cranfield, settings, queries=queries, depth=20)
        assert cached.path == path
        assert_frame_equal(cached.frame, frame)
        path.unlink()
        local = collection_frame(cranfield, settings, queries=queries, depth=20)
        assert_frame_equal(local.frame, frame)
    finally:
        path.unlink(missing_ok=True)
