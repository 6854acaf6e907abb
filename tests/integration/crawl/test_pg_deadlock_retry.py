"""A PostgreSQL write that loses a real deadlock runs again instead of killing the worker.

Two crawl workers write overlapping rows; PostgreSQL breaks a lock cycle by aborting one
transaction (a fleet bench run died on ``DeadlockDetected`` in a lease renewal). The
victim here is made deterministic with a short ``deadlock_timeout`` in its own session.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg

from crawl.state.pg_session import retry_on_conflict


def test_the_deadlock_victim_is_run_again_and_both_writes_land(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as setup:
        setup.execute("CREATE TABLE t (id int PRIMARY KEY, v int)")
        setup.execute("INSERT INTO t VALUES (1, 0), (2, 0)")
    holder = psycopg.connect(pg_dsn)
    holder.execute("SET deadlock_timeout = '30s'")  # never the one that gives up
    holder.execute("UPDATE t SET v = v + 1 WHERE id = 1")
    attempts: list[int] = []
    errors: list[BaseException] = []
    victim_has_row_2 = threading.Event()
    holder_waits = threading.Event()

    @retry_on_conflict
    def victim() -> None:
        attempts.append(1)
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("SET deadlock_timeout = '50ms'")
            conn.execute("UPDATE t SET v = v + 10 WHERE id = 2")
            victim_has_row_2.set()
            assert holder_waits.wait(10)
            conn.execute("UPDATE t SET v = v + 10 WHERE id = 1")  # closes the cycle (first try)

    def run(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            errors.append(exc)

    def hold() -> None:
        assert victim_has_row_2.wait(10)
        holder.execute("UPDATE t SET v = v + 1 WHERE id = 2")  # waits for the victim's row 2
        holder.commit()

    threads = [threading.Thread(target=run, args=(victim,)), threading.Thread(target=run, args=(hold,))]
    for thread in threads:
        thread.start()
    assert victim_has_row_2.wait(10)
    with psycopg.connect(pg_dsn, autocommit=True) as watch:  # until the holder waits on row 2
        deadline = time.monotonic() + 10
        while not watch.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE t %'"
        ).fetchone()[0]:  # type: ignore[index]
            assert time.monotonic() < deadline, "the holder never waited on row 2"
            time.sleep(0.01)
    holder_waits.set()
    for thread in threads:
        thread.join(20)
    holder.close()
    assert not any(t.is_alive() for t in threads) and not errors
    assert len(attempts) == 2
    with psycopg.connect(pg_dsn) as check:
        assert check.execute("SELECT id, v FROM t ORDER BY id").fetchall() == [(1, 11), (2, 11)]
