"""Offline comparisons on a real judged collection, in process and through the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.settings import Settings
from tests.integration.experiments.conftest import SHUFFLED
from training.evaluate import evaluate
from training.experiments.offline import compare, write_markdown

REPO = Path(__file__).resolve().parents[3]
KEYS = [
    "a",
    "b",
    "metric",
    "mean_a",
    "mean_b",
    "delta",
    "ci95",
    "p_randomization",
    "p_ttest",
    "wins",
    "ties",
    "losses",
]


def test_a_known_worse_ranker_loses_significantly(eval_dir: Path, exp_data_dir: Path, tmp_path: Path) -> None:
    settings = Settings(data_dir=exp_data_dir)
    report = compare(
        ["bm25", SHUFFLED, "bm25-notitle"], [eval_dir / "cisi"], settings=settings, resamples=4000
    )
    shuffled, notitle = report.pooled
    bm25 = evaluate(eval_dir / "cisi", "bm25", settings=settings)
    assert shuffled.mean_a == pytest.approx(bm25.means["ndcg@10"], abs=1e-9)
    assert shuffled.delta == pytest.approx(shuffled.mean_b - shuffled.mean_a)
    assert shuffled.delta < -0.1 and shuffled.ci95[1] < 0
    assert shuffled.p_randomization < 0.001 and shuffled.p_ttest < 0.001
    assert shuffled.losses > 3 * shuffled.wins
    assert shuffled.wins + shuffled.ties + shuffled.losses == 76
    # Two Bs against one baseline: Holm-adjusted p-values, never below the raw ones.
    for c in (shuffled, notitle):
        assert c.p_randomization_holm is not None and c.p_randomization_holm >= c.p_randomization
    md = write_markdown(report, tmp_path)
    text = md.read_text()
    assert f"| {SHUFFLED} | all | 76 |" in text and "p rand (Holm)" in text
    svg = tmp_path / f"compare-bm25-vs-{SHUFFLED}-deltas.svg"
    assert svg.read_text().startswith("<svg") and f"]({svg.name})" in text


def test_cli_prints_one_json_object_with_per_dataset_entries(
    eval_dir: Path, exp_data_dir: Path, tmp_path: Path
) -> None:
    code = "from cli.main import main; main()"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "experiment",
            "compare",
            "--a",
            "bm25",
            "--b",
            "bm25-notitle",
            "--dataset",
            str(eval_dir / "cranfield"),
            "--dataset",
            str(eval_dir / "cisi"),
            "--json",
            "--out",
            str(tmp_path / "report"),
            "--resamples",
            "2000",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRAWL_DATA_DIR": str(exp_data_dir)},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    out = json.loads(lines[0])
    assert list(out)[: len(KEYS)] == KEYS
    assert (out["a"], out["b"], out["metric"]) == ("bm25", "bm25-notitle", "ndcg@10")
    assert out["wins"] + out["ties"] + out["losses"] == 225 + 76
    per = out["datasets"]
    assert set(per) == {"cranfield", "cisi"}
    pooled_mean = (225 * per["cranfield"]["mean_a"] + 76 * per["cisi"]["mean_a"]) / 301
    assert out["mean_a"] == pytest.approx(pooled_mean, abs=1e-5)
    assert out["ci95"][0] <= out["delta"] <= out["ci95"][1]
    assert Path(out["report"]).exists()
