"""How far a running embeddings backfill is: written by the job, read by the service.

The job and the service are separate processes, so progress goes through one small
JSON file in the index root (``layout.backfill_progress_file``), replaced atomically
so a reader never sees half of it. Writes are throttled: a progress callback fires
once per committed segment, which can be many times a second.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

from core.atomic import write_text
from retrieval.index import layout

State = Literal["loading", "embedding", "publishing", "done", "failed"]


@dataclass(frozen=True, slots=True)
class BackfillProgress:
    state: State
    done: int = 0
    """Passages encoded so far by this run."""
    total: int = 0
    """Passages this run has to encode (the rest are linked from the vector store)."""
    rate: float = 0.0
    """Passages per second since the first one."""
    eta_s: float | None = None
    model_id: str = ""
    generation: str = ""
    """The generation being filled (published when ``state`` is ``done``)."""
    detail: str = ""
    updated_at: float = 0.0

    @property
    def percent(self) -> float:
        return 100.0 * self.done / self.total if self.total else (100.0 if self.state == "done" else 0.0)


def write_progress(root: Path, progress: BackfillProgress) -> None:
    stamped = replace(progress, updated_at=time.time())
    write_text(layout.backfill_progress_file(root), json.dumps(asdict(stamped)), durable=False)


def read_progress(root: Path) -> BackfillProgress | None:
    """The last progress written under ``root``, or None when no backfill ever ran there."""
    try:
        raw = json.loads(layout.backfill_progress_file(root).read_text())
        return BackfillProgress(**raw)
    except (FileNotFoundError, json.JSONDecodeError, TypeError):
        return None


class ProgressFile:
    """A backfill ``on_progress`` callback that keeps the progress file current."""

    def __init__(self, root: Path, *, model_id: str, every_s: float = 0.5) -> None:
        self.root = Path(root)
        self.model_id = model_id
        self.every_s = every_s
        self._started: float | None = None
        self._last = 0.0
        self.generation = ""

    def state(self, state: State, detail: str = "", *, done: int = 0, total: int = 0) -> None:
        write_progress(
            self.root,
            BackfillProgress(
                state, done, total, model_id=self.model_id, generation=self.generation, detail=detail
            ),
        )

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self._started is None:
            self._started = now
        if done < total and now - self._last < self.every_s:
            return
        self._last = now
        elapsed = now - self._started
        rate = done / elapsed if elapsed > 0 and done else 0.0
        eta = (total - done) / rate if rate else None
        write_progress(
            self.root,
            BackfillProgress(
                "embedding", done, total, rate, eta, model_id=self.model_id, generation=self.generation
            ),
        )
