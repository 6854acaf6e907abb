"""The serving generation's :class:`~retrieval.query.suggest.Suggester`, built once per generation.

A build reads every stored document (seconds on 100,000), so it runs in a background
thread, one at a time, holding its generation open (:meth:`GenerationSet.using`). Until it
ends, keystrokes are completed by the suggester built last, for the generation served
before: a publish is followed a few seconds late rather than stalling typing. Only a
process that has built none waits for the first (:meth:`SuggesterCache.wait`). An in-place
update (``trawl run``) reopens the generation every few seconds; its views are rebuilt at
most every ``rebuild_gap_s``, a new generation at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from retrieval.index.generation import Generation, GenerationSet
from retrieval.query.suggest import Suggester

logger = logging.getLogger(__name__)

REBUILD_GAP_S = 60.0


@dataclass(frozen=True, slots=True)
class _Built:
    view: str
    generation: str
    at: float
    suggester: Suggester


class SuggesterCache:
    """The suggester of the newest generation built, and the build of the serving one."""

    def __init__(
        self, build: Callable[[Generation], Suggester], *, rebuild_gap_s: float = REBUILD_GAP_S
    ) -> None:
        self._build = build
        self._gap = rebuild_gap_s
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._latest: _Built | None = None
        self._building: str | None = None
        self._tried: tuple[str, float] | None = None
        """The view of the last build started, and when: a failed one is not retried at once."""

    def get(self, generations: GenerationSet) -> Suggester | None:
        """The serving generation's suggester, else the latest built (None before any); starts
        the serving generation's build when it is due."""
        generation = generations.current
        with self._lock:
            latest = self._latest
            if latest is not None and latest.view == generation.view:
                return latest.suggester
            if self._building is None and self._due(generation):
                self._building = generation.view
                self._tried = (generation.view, time.monotonic())
                threading.Thread(
                    target=self._run,
                    args=(generations, generation.view),
                    name="trawl-suggest-build",
                    daemon=True,
                ).start()
            return latest.suggester if latest is not None else None

    def _due(self, generation: Generation) -> bool:
        now = time.monotonic()
        if self._tried is not None and self._tried[0] == generation.view and now - self._tried[1] < self._gap:
            return False  # this view's build failed a moment ago
        latest = self._latest
        return latest is None or latest.generation != generation.id or now - latest.at >= self._gap

    def wait(self, timeout_s: float) -> Suggester | None:
        """The latest suggester once one is built, or None when the build running fails or
        takes longer than ``timeout_s``."""
        with self._changed:
            self._changed.wait_for(lambda: self._latest is not None or self._building is None, timeout_s)
            return self._latest.suggester if self._latest is not None else None

    def settle(self, timeout_s: float) -> bool:
        """Wait for the running build to end (tests and benchmarks); False when it did not in time."""
        with self._changed:
            return self._changed.wait_for(lambda: self._building is None, timeout_s)

    def _run(self, generations: GenerationSet, view: str) -> None:
        built: _Built | None = None
        try:
            with generations.using(view) as generation:
                if generation is not None:  # dropped since: the next request asks for the new one
                    started = time.perf_counter()
                    suggester = self._build(generation)
                    built = _Built(view, generation.id, time.monotonic(), suggester)
                    logger.info(
                        "suggestions for %s: %d phrases in %.1f s",
                        view,
                        len(suggester),
                        time.perf_counter() - started,
                    )
        except Exception:  # noqa: BLE001 - a failed build leaves the last suggester serving
            logger.exception("building the suggestions of %s failed", view)
        with self._changed:
            if built is not None:
                self._latest = built
            self._building = None
            self._changed.notify_all()
