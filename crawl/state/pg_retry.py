"""Which PostgreSQL failures a crawl worker runs again, and for how long.

* **Conflicts** (a deadlock or serialization victim): PostgreSQL rolled the transaction
  back whole to break a lock cycle between workers, and running it again is the remedy.
* **Connection loss** (a restart's AdminShutdown, connections refused while it is down, a
  network failure): the worker waits with backoff, reconnects and runs the call again,
  for up to ``crawl.db_outage_s``; then it gives up with ``DatabaseUnavailable``, one line.

The outermost decorated call on a thread is what runs again, and it is one transaction
(or one autocommit statement, or a round of them), so nothing is half-applied: a
transaction cut short was rolled back by the server, and one whose commit went through
just before the connection dropped runs again harmlessly, since every write here is
idempotent (conditional updates of the per-URL state machine, ``ON CONFLICT DO NOTHING``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from core.errors import DatabaseUnavailable

logger = logging.getLogger(__name__)

__all__ = ["Reconnecting", "is_connection_loss", "retry_on_conflict"]

P = ParamSpec("P")
R = TypeVar("R")
_CONFLICT_RETRIES = 5
_BACKOFF_FIRST_S = 0.1
_BACKOFF_MAX_S = 2.0
"""Reconnection attempts double from the first to this: a restarted server is found within
two seconds of accepting connections again."""
_SHUTDOWN_STATES = frozenset({"57P01", "57P02", "57P03"})
"""admin_shutdown, crash_shutdown, cannot_connect_now (starting up or shutting down)."""
_active = threading.local()
"""Whether this thread is inside a decorated call: an inner one is run again by the outermost."""
_state_lock = threading.Lock()


class _QuietLostPipeline(logging.Filter):
    """psycopg warns twice when a pipeline ends on a connection the server closed: the loss is
    said once, by ``Reconnecting._lost``."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (
            str(record.msg).startswith("error ignored terminating") and "is lost" in record.getMessage()
        )


logging.getLogger("psycopg").addFilter(_QuietLostPipeline())


def is_connection_loss(exc: BaseException) -> bool:
    """True when the connection to PostgreSQL was lost or could not be made (not a statement's error)."""
    import psycopg  # lazy: a SQLite crawl never loads the driver

    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _SHUTDOWN_STATES


class Reconnecting:
    """A session whose calls ride out an outage: what ``retry_on_conflict`` needs of it."""

    outage_s: float = 0.0
    """How long a call keeps trying while PostgreSQL is unreachable: a crawl run sets
    ``crawl.db_outage_s``; elsewhere (a status read, an API request) a loss fails at once."""
    reconnected_at: float = 0.0
    """When (``time.time()``) a call last succeeded after the connection had been lost."""
    _down_since: float | None = None
    _gave_up = False

    @abstractmethod
    def _reopen(self) -> None:
        """Replace the connections the server closed (raises while it is still down)."""

    @abstractmethod
    def _where(self) -> str:
        """The database, for messages (no password)."""

    def _lost(self, exc: BaseException, lost_at: float, delay: float) -> None:
        """A call lost its connection ``lost_at`` (monotonic): wait ``delay``, or give up past the bound."""
        waited = time.monotonic() - lost_at
        with _state_lock:
            first = self._down_since is None
            if first:
                self._down_since = time.monotonic()
        text = str(exc).strip()
        reason = f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
        if first and not self._gave_up and self.outage_s > 0:
            logger.warning(
                "Lost the connection to PostgreSQL at %s (%s); retrying for up to %g s (crawl.db_outage_s)",
                self._where(),
                reason,
                self.outage_s,
            )
        if self._gave_up or waited >= self.outage_s:
            self._gave_up = True
            raise DatabaseUnavailable(
                f"PostgreSQL at {self._where()} unreachable for over {self.outage_s:g} s "
                f"(crawl.db_outage_s): {reason}; run the command again once it is back"
            ) from exc
        time.sleep(min(delay, max(0.0, self.outage_s - waited)))

    def _back(self) -> None:
        """A call succeeded after a loss: the outage is over for this session."""
        with _state_lock:
            since, self._down_since = self._down_since, None
            self.reconnected_at = time.time()
        if since is not None:
            logger.warning(
                "PostgreSQL at %s is back after %.1f s; resuming", self._where(), time.monotonic() - since
            )


def retry_on_conflict(method: Callable[P, R]) -> Callable[P, R]:
    """Run a ``Reconnecting`` session's call again after a conflict or a lost connection (module doc)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if getattr(_active, "on", False):
            return method(*args, **kwargs)  # the outermost call runs the whole again
        _active.on = True
        try:
            session = args[0] if args and isinstance(args[0], Reconnecting) else None
            return _retried(session, method, args, kwargs)
        finally:
            _active.on = False

    return wrapper


def _retried(session: Reconnecting | None, method: Callable[..., R], args: Any, kwargs: Any) -> R:
    """Conflicts are run again for any call; a lost connection only for a session's method."""
    from psycopg import errors  # lazy: as ``is_connection_loss``

    conflicts = 0
    lost_at: float | None = None
    delay = _BACKOFF_FIRST_S
    while True:
        try:
            if session is not None and lost_at is not None:
                session._reopen()
            result = method(*args, **kwargs)
        except (errors.DeadlockDetected, errors.SerializationFailure) as exc:
            conflicts += 1
            if conflicts >= _CONFLICT_RETRIES:
                raise
            logger.info("retrying %s after %s", method.__name__, type(exc).__name__)
            time.sleep(0.01 * 2**conflicts)
            continue
        except Exception as exc:
            if session is None or not is_connection_loss(exc):
                raise
            lost_at = time.monotonic() if lost_at is None else lost_at
            session._lost(exc, lost_at, delay)
            delay = min(_BACKOFF_MAX_S, delay * 2)
            continue
        if session is not None and lost_at is not None:
            session._back()
        return result
