"""The engine switch: settings and options, and a clear failure when the cluster is unreachable."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from core.jobs import EngineUnavailable, JobEngine
from core.settings import JobSettings, Settings

REPO = Path(__file__).resolve().parents[3]


def test_command_line_overrides_settings() -> None:
    settings = JobSettings(engine="ray", ray_address="auto")
    assert JobEngine.from_settings(settings).address == "auto"
    local = JobEngine.from_settings(settings, engine="local")
    assert not local.is_ray
    assert JobEngine.from_settings(JobSettings()).engine == "local"


def test_environment_sets_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAWL_JOBS__ENGINE", "ray")
    monkeypatch.setenv("TRAWL_JOBS__RAY_ADDRESS", "10.0.0.5:6379")
    job = JobEngine.from_settings(Settings().jobs)
    assert job.is_ray and job.address == "10.0.0.5:6379"


def test_local_engine_starts_nothing() -> None:
    with JobEngine().session() as ray:
        assert ray is None


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_cluster_is_a_clear_error() -> None:
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(EngineUnavailable, match="cannot reach the Ray cluster"):
        with JobEngine(engine="ray", address=address).session():
            pass


def test_unreachable_cluster_exits_non_zero(tmp_path: Path, eval_dir: Path) -> None:
    address = f"127.0.0.1:{closed_port()}"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "index",
            "--beir",
            str(eval_dir / "cranfield"),
            "--index",
            str(tmp_path / "index"),
            "--engine",
            "ray",
            "--ray-address",
            address,
        ],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode != 0
    assert "cannot reach the Ray cluster" in run.stderr
    assert not (tmp_path / "index").exists()
