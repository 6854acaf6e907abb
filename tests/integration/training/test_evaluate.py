"""The harness on a real collection, through the command line as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.evaluate import evaluate

REPO = Path(__file__).resolve().parents[3]


def test_eval_json_prints_one_object(eval_dir: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "eval",
            "--dataset",
            str(eval_dir / "cranfield"),
            "--ranker",
            "bm25",
            "--json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "TRAWL_DATA_DIR": str(tmp_path)},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert (out["dataset"], out["ranker"], out["queries"]) == ("cranfield", "bm25", 225)
    assert set(out) >= {"ndcg@10", "map", "recall@100", "mrr@10", "per_query"}
    assert len(out["per_query"]) == 225
    mean = sum(v["ndcg@10"] for v in out["per_query"].values()) / 225
    assert out["ndcg@10"] == pytest.approx(mean, abs=1e-5)
    # At least as good as the best BM25 peer measured on this collection (bm25s, .3735).
    assert out["ndcg@10"] >= 0.3735
    assert (tmp_path / "cache" / "eval").exists()


def test_eval_rejects_unknown_ranker(eval_dir: Path, tmp_path: Path) -> None:
    from core.errors import ConfigError
    from core.settings import Settings

    with pytest.raises(ConfigError, match="Unknown ranker 'nope'; expected one of: "):
        evaluate(eval_dir / "cisi", "nope", settings=Settings(data_dir=tmp_path))
