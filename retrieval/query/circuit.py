"""Circuit breakers for shards: a shard that keeps missing its deadline stops costing every query one.

Without them a hung shard (a stopped process, a dead network path) makes each query wait the
whole deadline before answering partially, for as long as the hang lasts. After
``trip_after`` misses in a row a shard's circuit opens: the fan-out skips it at once (the
answer is partial and names it), and a background thread probes it with the call that last
failed, every ``probe_every_s``, until one answers within ``probe_timeout_s``; then the circuit
closes and queries reach the shard again. The state of every circuit is what ``/healthz``
reports as a problem and the ``trawl_shard_circuit_open`` gauge counts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

logger = logging.getLogger(__name__)

Probe = Callable[[float], object]
"""A call to the shard with a timeout (seconds); raising means the shard is still down."""


@dataclass(slots=True)
class _Circuit:
    misses: int = 0
    """Misses in a row (a deadline passed while the shard's call was running, or it raised)."""
    opened_at: float | None = None
    """Wall-clock time the circuit opened; None while closed."""
    probes: int = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class CircuitState:
    """One shard's circuit as ``/healthz`` and the metrics show it."""

    shard: int
    open: bool
    misses: int
    opened_at: float | None
    probes: int
    last_error: str

    def problem(self) -> str:
        since = time.strftime("%H:%M:%S", time.gmtime(self.opened_at or 0))
        return (
            f"shard {self.shard}: not answering ({self.misses} misses in a row; skipped since "
            f"{since} UTC, probed {self.probes} times){': ' + self.last_error if self.last_error else ''}"
        )


class ShardCircuits:
    """One circuit per shard, and the thread that probes the open ones."""

    def __init__(
        self,
        shards: int,
        *,
        trip_after: int = 3,
        probe_every_s: float = 1.0,
        probe_timeout_s: float = 1.0,
        on_change: Callable[[Sequence[CircuitState]], None] | None = None,
    ) -> None:
        self.trip_after = trip_after
        self.probe_every_s = probe_every_s
        self.probe_timeout_s = probe_timeout_s
        self._circuits = [_Circuit() for _ in range(shards)]
        self._probes: dict[int, Probe] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._thread: threading.Thread | None = None
        self._on_change = on_change

    def is_open(self, shard: int) -> bool:
        return self._circuits[shard].opened_at is not None  # read unlocked: a stale answer costs one call

    def succeeded(self, shard: int) -> None:
        circuit = self._circuits[shard]
        if circuit.misses or circuit.opened_at is not None:
            with self._lock:
                was_open = circuit.opened_at is not None
                circuit.misses, circuit.opened_at, circuit.probes = 0, None, 0
                self._probes.pop(shard, None)
            if was_open:
                logger.warning("shard %d answers again: circuit closed", shard)
                self._changed()

    def missed(self, shard: int, probe: Probe, error: str = "") -> None:
        """A call to ``shard`` failed or missed its deadline; ``probe`` repeats it for the prober."""
        with self._lock:
            circuit = self._circuits[shard]
            circuit.misses += 1
            circuit.last_error = error
            opened = circuit.opened_at is None and circuit.misses >= self.trip_after
            if opened:
                circuit.opened_at = time.time()
                self._probes[shard] = probe
                self._start_locked()
                self._wake.notify_all()
        if opened:
            logger.warning(
                "shard %d missed %d calls in a row: circuit open, skipped until a probe answers",
                shard,
                circuit.misses,
            )
            self._changed()

    def states(self) -> list[CircuitState]:
        with self._lock:
            return [
                CircuitState(i, c.opened_at is not None, c.misses, c.opened_at, c.probes, c.last_error)
                for i, c in enumerate(self._circuits)
            ]

    def problems(self) -> list[str]:
        return [s.problem() for s in self.states() if s.open]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify_all()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.states())

    def _start_locked(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._probe_loop, name="trawl-shard-probe", daemon=True)
            self._thread.start()

    def _probe_loop(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._probes:
                    self._wake.wait()
                if self._closed:
                    return
                due = dict(self._probes)
            for shard, probe in due.items():
                try:
                    probe(self.probe_timeout_s)
                except Exception as exc:  # noqa: BLE001 - still down: probed again later
                    with self._lock:
                        self._circuits[shard].probes += 1
                        self._circuits[shard].last_error = str(exc)[:200]
                    continue
                self.succeeded(shard)
            with self._lock:
                if not self._closed and self._probes:
                    self._wake.wait(self.probe_every_s)
