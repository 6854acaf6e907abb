"""Sampled logging of the exact feature rows the serving stage scored.

Recomputing features offline for logged queries invites skew (a different analyzer,
a newer PageRank, another clock); logging what was actually scored does not. Each
row carries the model and index generation that produced it, the query text and the
clock value freshness was computed with, so ``training.frames.frame_from_logs`` can
join rows with judgments or clicks, and a test can recompute them exactly.

Rows are buffered and written as Parquet parts (``features-<time>-<n>.parquet``),
each written under a temporary name and renamed (``core.atomic``), so readers never
see half a file.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from numpy.typing import NDArray

from core.atomic import write_with
from core.types import DocId, Query
from rerank.features import SCHEMA

logger = logging.getLogger(__name__)

KEY_COLUMNS: tuple[str, ...] = (
    "logged_at",
    "generation",
    "model_id",
    "query_id",
    "query",
    "now_s",
    "doc_id",
    "position",
    "score",
)


def query_id_of(raw: str) -> str:
    """Stable id of a query text (joins logged rows with judgments keyed by text)."""
    return hashlib.blake2b(raw.encode("utf-8"), digest_size=8).hexdigest()


class FeatureLogger:
    """Buffers sampled feature rows and writes them as Parquet parts."""

    def __init__(
        self,
        directory: Path,
        *,
        sample_rate: float,
        buffer_rows: int = 4096,
        rng: random.Random | None = None,
    ) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate={sample_rate} is outside [0, 1].")
        self.directory = Path(directory)
        self.sample_rate = sample_rate
        self.buffer_rows = buffer_rows
        self._rng = rng or random.Random()
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._parts = 0

    def should_log(self) -> bool:
        """Sample whole queries (all candidates of a query or none of them)."""
        return self.sample_rate >= 1.0 or self._rng.random() < self.sample_rate

    def log(
        self,
        *,
        query: Query,
        doc_ids: Sequence[DocId],
        values: NDArray[np.float64],
        scores: NDArray[np.float64],
        model_id: str,
        generation: str,
        now_s: float | None,
    ) -> None:
        logged_at = time.time()
        order = np.argsort(-scores, kind="stable")
        position = np.empty(len(order), dtype=np.int64)
        position[order] = np.arange(1, len(order) + 1)
        rows = []
        for i, doc_id in enumerate(doc_ids):
            row: dict[str, Any] = {
                "logged_at": logged_at,
                "generation": generation,
                "model_id": model_id,
                "query_id": query_id_of(query.raw),
                "query": query.raw,
                "now_s": now_s,
                "doc_id": int(doc_id),
                "position": int(position[i]),
                "score": float(scores[i]),
            }
            row.update(zip(SCHEMA, (float(v) for v in values[i]), strict=True))
            rows.append(row)
        with self._lock:
            self._rows.extend(rows)
            full = len(self._rows) >= self.buffer_rows
        if full:
            self.flush()

    def flush(self) -> Path | None:
        """Write buffered rows as one Parquet part; None when nothing was buffered."""
        with self._lock:
            rows, self._rows = self._rows, []
            self._parts += 1
            part = self._parts
        if not rows:
            return None
        schema: dict[str, Any] = {
            "logged_at": pl.Float64,
            "generation": pl.String,
            "model_id": pl.String,
            "query_id": pl.String,
            "query": pl.String,
            "now_s": pl.Float64,
            "doc_id": pl.UInt64,
            "position": pl.Int64,
            "score": pl.Float64,
            **dict.fromkeys(SCHEMA, pl.Float64),
        }
        frame = pl.DataFrame(rows, schema=schema)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"features-{int(time.time() * 1000)}-{part:06d}.parquet"
        write_with(path, frame.write_parquet)
        logger.info("feature log: wrote %d rows to %s", frame.height, path)
        return path

    def close(self) -> None:
        self.flush()


def read_feature_log(directory: Path) -> pl.DataFrame:
    """Every logged row under ``directory`` (an empty frame when there are none)."""
    parts = sorted(Path(directory).glob("features-*.parquet"))
    if not parts:
        return pl.DataFrame(schema={c: pl.Float64 for c in (*KEY_COLUMNS, *SCHEMA)})
    return pl.concat([pl.read_parquet(p) for p in parts], how="vertical")
