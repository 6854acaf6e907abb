"""What a serving process holds for experiments: the definitions, the logs, recent impressions.

One instance per process, opened at start-up and closed at shutdown (the close
flushes the logs). It has no web framework in it, so the same object serves the
FastAPI routes, a test, or a batch replay.

Clicks are checked against the impression they claim to come from (the doc id must be
the one shown at that position), so a stale or forged click is refused instead of
polluting the analysis. A click repeating an (impression, position) within
``click_dedup_s`` (a double click, a retry) is answered with the first click's id and not
logged again. Recent impressions are kept in a bounded map, warmed from the log at
start-up (a click on a result shown before a restart counts) and, with several serving
workers, read from the parts the others wrote (:meth:`ExperimentRuntime.catch_up`) when a
click names an impression another worker showed.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Self

import pyarrow as pa
import pyarrow.parquet as pq

from core.errors import BadClick, UnknownImpression
from core.settings import Settings
from online.book import Assignment, ExperimentBook
from online.interleaving import Team
from online.logs import IMPRESSION_SCHEMA, ExperimentLogs, part_files

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ClickRecord:
    click_id: str
    duplicate: bool
    """True when the same (impression, position) was clicked within the dedup window."""


@dataclass(frozen=True, slots=True)
class ShownImpression:
    experiment: str
    variant: str
    doc_ids: tuple[int, ...]
    teams: tuple[str, ...]


class ExperimentRuntime:
    """Assigns requests to variants and records impressions and clicks."""

    def __init__(
        self,
        book: ExperimentBook,
        logs: ExperimentLogs,
        *,
        impression_cache: int = 100_000,
        click_dedup_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        peer_wait_s: float = 0.0,
    ) -> None:
        """``peer_wait_s`` > 0: other processes log impressions into the same folder; a click
        on one of theirs is looked for in their parts for up to that long (their flush interval)."""
        self.book = book
        self.logs = logs
        self.cache_size = impression_cache
        self.click_dedup_s = click_dedup_s
        self._clock = clock
        self._recent: OrderedDict[str, ShownImpression] = OrderedDict()
        self._clicked: OrderedDict[tuple[str, int], tuple[float, str]] = OrderedDict()
        """(impression, position) → (monotonic time, click id) of clicks inside the dedup window."""
        self._lock = threading.Lock()
        self.peer_wait_s = peer_wait_s
        self._parts_seen: set[str] = set()
        """Impression parts read (or older than what the warm-up read): not read again."""
        self._warm()

    @classmethod
    def from_settings(cls, settings: Settings, *, peers: bool = False) -> Self:
        s = settings.experiments
        book = ExperimentBook.load(s.experiments_file)
        logger.info(
            "experiments loaded from %s: %s", s.experiments_file, ", ".join(book.experiments) or "none"
        )
        return cls(
            book,
            ExperimentLogs.from_settings(settings),
            impression_cache=s.impression_cache,
            click_dedup_s=s.click_dedup_s,
            peer_wait_s=s.flush_interval_s + 1.0 if peers else 0.0,
        )

    def _warm(self) -> None:
        """Load the newest ``cache_size`` impressions, reading parts newest-first (not the whole log)."""
        parts = part_files(self.logs.paths.impressions)
        self._parts_seen.update(p.name for p in parts)
        if self.cache_size == 0:
            return
        tables: list[pa.Table] = []
        rows = 0
        for part in reversed(parts):
            table = _impressions(part)
            tables.append(table)
            rows += table.num_rows
            if rows >= self.cache_size:
                break
        for table in reversed(tables):
            self._remember_all(table)
        logger.info(
            "warmed %d recent impressions from %s", min(rows, self.cache_size), self.logs.paths.impressions
        )

    def _remember_all(self, table: pa.Table) -> None:
        for row in table.to_pylist():
            shown = ShownImpression(
                row["experiment"], row["variant"], tuple(row["doc_ids"]), tuple(row["teams"])
            )
            self._remember(row["impression_id"], shown)

    def knows(self, impression_id: str) -> bool:
        """Whether a click on ``impression_id`` can be checked here now."""
        with self._lock:
            return impression_id in self._recent

    def catch_up(self) -> int:
        """Read the impression parts written since the last look (by peers); returns how many."""
        if self.cache_size == 0:
            return 0
        fresh = [p for p in part_files(self.logs.paths.impressions) if p.name not in self._parts_seen]
        for part in fresh:
            try:
                table = _impressions(part)
            except (OSError, pa.ArrowInvalid) as exc:  # a part renamed away or removed meanwhile
                logger.warning("impression part %s not read: %s", part, exc)
                continue
            self._parts_seen.add(part.name)
            self._remember_all(table)
        return len(fresh)

    def _remember(self, impression_id: str, shown: ShownImpression) -> None:
        with self._lock:
            self._recent[impression_id] = shown
            while len(self._recent) > self.cache_size:
                self._recent.popitem(last=False)

    def assign(self, unit_id: str | None, now: datetime | None = None) -> Assignment | None:
        return self.book.assign(unit_id, now)

    def record_impression(
        self,
        *,
        query: str,
        doc_ids: Sequence[int],
        assignment: Assignment | None = None,
        unit_id: str | None = None,
        teams: Sequence[Team] = (),
        ranker: str = "",
        generation: str = "",
        page: int = 1,
        size: int = 10,
        impression_id: str | None = None,
    ) -> str:
        """Log one search response; returns its impression id (the client echoes it in clicks)."""
        if teams and len(teams) != len(doc_ids):
            raise ValueError(f"teams ({len(teams)}) must align with doc_ids ({len(doc_ids)})")
        impression_id = impression_id or uuid.uuid4().hex
        experiment = assignment.experiment if assignment else ""
        variant = assignment.variant if assignment else ""
        shown = ShownImpression(experiment, variant, tuple(int(d) for d in doc_ids), tuple(teams))
        self.logs.impressions.append(
            {
                "impression_id": impression_id,
                "ts": datetime.now(UTC),
                "experiment": experiment,
                "variant": variant,
                "unit_id": unit_id or "",
                "query": query,
                "ranker": ranker or (",".join(assignment.rankers) if assignment else ""),
                "generation": generation,
                "page": page,
                "size": size,
                "doc_ids": list(shown.doc_ids),
                "teams": list(shown.teams),
            }
        )
        if self.cache_size:
            self._remember(impression_id, shown)
        return impression_id

    def record_click(self, *, impression_id: str, doc_id: int, position: int) -> str:
        """Log a click on the result at 1-based ``position`` of an impression; returns the click id."""
        return self.click(impression_id=impression_id, doc_id=doc_id, position=position).click_id

    def click(self, *, impression_id: str, doc_id: int, position: int) -> ClickRecord:
        """Check a click against its impression and log it once per dedup window."""
        with self._lock:
            shown = self._recent.get(impression_id)
        if shown is None:
            raise UnknownImpression(
                f"Unknown impression_id {impression_id!r}; it was never shown or is too old."
            )
        if not 1 <= position <= len(shown.doc_ids):
            raise BadClick(
                f"position={position} is out of range; the impression showed {len(shown.doc_ids)} results."
            )
        if shown.doc_ids[position - 1] != doc_id:
            raise BadClick(
                f"doc_id={doc_id} was not shown at position {position} of impression {impression_id}."
            )
        now = self._clock()
        key = (impression_id, position)
        with self._lock:
            while self._clicked and next(iter(self._clicked.values()))[0] < now - self.click_dedup_s:
                self._clicked.popitem(last=False)
            earlier = self._clicked.get(key)
            if earlier is not None:
                return ClickRecord(earlier[1], duplicate=True)
            click_id = uuid.uuid4().hex
            if self.click_dedup_s > 0:
                self._clicked[key] = (now, click_id)
        self.logs.clicks.append(
            {
                "click_id": click_id,
                "impression_id": impression_id,
                "ts": datetime.now(UTC),
                "doc_id": doc_id,
                "position": position,
                "experiment": shown.experiment,
                "variant": shown.variant,
                "team": shown.teams[position - 1] if shown.teams else "",
            }
        )
        return ClickRecord(click_id, duplicate=False)

    def close(self) -> None:
        self.logs.close()


def _impressions(part: Path) -> pa.Table:
    """The columns of one impression part that a click is checked against."""
    columns = ["impression_id", "experiment", "variant", "doc_ids", "teams"]
    return pq.read_table(part, columns=columns, schema=IMPRESSION_SCHEMA)
