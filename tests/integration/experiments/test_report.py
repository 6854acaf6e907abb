"""End to end: simulated users on real rankings → Parquet logs → `trawl experiment report` decides right."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.settings import Settings
from online.book import ExperimentBook
from online.logs import ExperimentLogs
from online.runtime import ExperimentRuntime
from tests.integration.experiments.conftest import SHUFFLED
from training.experiments.analysis import report
from training.experiments.simulator import PRESETS, pooled_runs, simulate_logs

REPO = Path(__file__).resolve().parents[3]
EXPERIMENTS = f"""
[experiments.ab-test]
salt = "ab"
stop = 2025-01-01T00:00:00Z
variants = [{{ name = "control", ranker = "bm25" }}, {{ name = "shuffled", ranker = "{SHUFFLED}" }}]

[experiments.il-test]
mode = "interleave"
salt = "il"
start = 2025-01-01T00:00:00Z
variants = [{{ name = "a", ranker = "bm25" }}, {{ name = "b", ranker = "{SHUFFLED}" }}]
"""


@pytest.fixture(scope="module")
def logged(eval_dir: Path, exp_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("report")
    (work / "experiments.toml").write_text(EXPERIMENTS)
    book = ExperimentBook.load(work / "experiments.toml")
    data_dir = Path(os.environ.get("PYTEST_EXP_DATA", work / "data"))
    runs_a, runs_b, rel = pooled_runs(
        "bm25", SHUFFLED, [eval_dir / "cisi"], settings=Settings(data_dir=data_dir)
    )
    runs = {"bm25": runs_a, SHUFFLED: runs_b}
    runtime = ExperimentRuntime(book, ExperimentLogs(work / "logs", flush_interval_s=None))
    model = PRESETS["navigational"]
    simulate_logs(runtime, book.get("ab-test"), runs, rel, impressions=3000, users=600, model=model, seed=1)
    simulate_logs(runtime, book.get("il-test"), runs, rel, impressions=1500, users=300, model=model, seed=2)
    runtime.close()
    return work, work / "logs"


def test_ab_report_finds_the_worse_variant_and_no_srm(logged: tuple[Path, Path]) -> None:
    work, logs = logged
    result = report("ab-test", log_dir=logs, book=ExperimentBook.load(work / "experiments.toml"))
    assert result.srm is not None and not result.srm.mismatch
    assert sum(v.impressions for v in result.variants) == 3000
    mrr = next(c for c in result.comparisons if c.metric == "mrr_clicks")
    assert mrr.delta < 0 and mrr.ci95[1] < 0 and mrr.p_value < 0.05


def test_report_command_prefers_the_better_ranker_by_interleaving(logged: tuple[Path, Path]) -> None:
    work, logs = logged
    code = "from cli.main import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "experiment", "report", "il-test", "--json", "--log-dir", str(logs)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRAWL_EXPERIMENTS__EXPERIMENTS_FILE": str(work / "experiments.toml")},
    )
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stdout.strip().splitlines()
    out = json.loads(line)
    inter = out["interleaving"]
    assert (out["experiment"], out["mode"], inter["impressions"]) == ("il-test", "interleave", 1500)
    assert inter["preferred"] == "a" and inter["p_sign"] < 0.05
    assert inter["wins_a"] + inter["wins_b"] + inter["ties"] == 1500
