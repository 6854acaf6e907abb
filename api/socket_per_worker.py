"""Several ``trawl serve`` workers, each accepting on a listening socket of its own.

uvicorn's workers share one listening socket, and whichever wakes first accepts every
connection waiting: a burst of keep-alive connections (a proxy's upstream pool, a load
generator's eight) all landed on one worker and one core (bench split 100/0, DECISIONS 76).
Here the parent binds one socket per worker on the same port with ``SO_REUSEPORT``, so
the kernel spreads connections over them by their addresses, and holds them: a connection
that reaches a dead worker's socket waits there for its replacement instead of being reset.
Supervision (health pings, restarts, SIGHUP) is uvicorn's, with worker *i* on socket *i*.
"""

from __future__ import annotations

import logging
import socket
import sys

from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.supervisors.multiprocess import Multiprocess, Process

logger = logging.getLogger("uvicorn.error")


def available() -> bool:
    """``SO_REUSEPORT`` spreads connections on Linux; elsewhere it means something else or is absent."""
    return hasattr(socket, "SO_REUSEPORT") and sys.platform.startswith("linux")


def listening_sockets(host: str, port: int, count: int, backlog: int) -> list[socket.socket]:
    """``count`` sockets listening on ``host:port`` in one ``SO_REUSEPORT`` group.

    Port 0 is resolved by the first socket so every socket shares the port it got.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]
            sock.listen(backlog)
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class SocketPerWorker(Multiprocess):
    """uvicorn's supervisor, with worker *i* always given socket *i* (also when it is replaced)."""

    def __init__(self, config: Config, sockets: list[socket.socket]) -> None:
        if len(sockets) != config.workers:
            raise ValueError(f"{config.workers} workers need {config.workers} sockets, not {len(sockets)}")
        super().__init__(config, sockets)

    def _start(self, slot: int) -> Process:
        process = Process(self.config, [self.sockets[slot]])
        process.start()
        return process

    def init_processes(self) -> None:
        self.processes = [self._start(slot) for slot in range(self.processes_num)]

    def keep_subprocess_alive(self) -> None:
        for slot, process in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()  # hung, or already gone
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                # It failed before serving: the app or the index is broken, and would be again.
                logger.error(f"Child process [{process.pid}] failed to start, stopping the parent process.")
                self.should_exit.set()
                return
            logger.info(f"Child process [{process.pid}] died; starting another on its socket")
            self.processes[slot] = self._start(slot)

    def restart_all(self) -> None:
        """SIGHUP: each worker replaced by one on the same socket, once the new one is ready."""
        for slot, old in enumerate(self.processes):
            if self.should_exit.is_set():
                return
            new = self._start(slot)
            if not new.wait_until_ready(self.config.timeout_worker_healthcheck, self.should_exit):
                new.kill()
                new.join()
                logger.error(f"New child process [{new.pid}] was not ready in time; keeping [{old.pid}]")
                return
            old.terminate()
            old.join()
            self.processes[slot] = new

    def handle_ttin(self) -> None:
        logger.warning("The worker count is fixed (one socket each); restart trawl serve with --workers")

    def handle_ttou(self) -> None:
        self.handle_ttin()


def run(config: Config) -> None:
    """Serve ``config`` (``config.workers`` > 1) with a socket per worker; closes them after."""
    sockets = listening_sockets(config.host, config.port, config.workers, config.backlog)
    try:
        SocketPerWorker(config, sockets).run()
    finally:
        for sock in sockets:
            sock.close()
