"""Listening sockets for ``trawl serve``'s workers: one port, one socket per worker."""

from __future__ import annotations

import socket

import pytest
from uvicorn.config import Config

from api import socket_per_worker
from api.socket_per_worker import SocketPerWorker, listening_sockets

pytestmark = pytest.mark.skipif(not socket_per_worker.available(), reason="SO_REUSEPORT spreads on Linux")


def test_port_zero_gives_every_socket_the_same_port() -> None:
    sockets = listening_sockets("127.0.0.1", 0, 3, backlog=16)
    try:
        ports = {sock.getsockname()[1] for sock in sockets}
        assert len(ports) == 1 and ports != {0}
        assert len({sock.fileno() for sock in sockets}) == 3
        # Each one listens: a connection is accepted by one of them.
        with socket.create_connection(("127.0.0.1", ports.pop()), timeout=10):
            pass
    finally:
        for sock in sockets:
            sock.close()


def test_a_port_another_program_holds_is_refused_and_nothing_is_left_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Track the sockets listening_sockets makes rather than counting the process's descriptors:
    # other threads (a previous test's, the garbage collector) open and close fds meanwhile.
    made: list[socket.socket] = []

    class Recorded(socket.socket):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(socket_per_worker.socket, "socket", Recorded)
    other = socket.socket()
    other.bind(("127.0.0.1", 0))
    other.listen()
    made.remove(other)
    try:
        with pytest.raises(OSError):
            listening_sockets("127.0.0.1", other.getsockname()[1], 2, backlog=16)
        assert made, "listening_sockets made no socket"
        assert [sock.fileno() for sock in made] == [-1] * len(made)
    finally:
        other.close()


def test_the_supervisor_needs_a_socket_per_worker() -> None:
    sockets = listening_sockets("127.0.0.1", 0, 1, backlog=16)
    try:
        with pytest.raises(ValueError, match="2 workers need 2 sockets"):
            SocketPerWorker(Config("api.app:app_from_environment", factory=True, workers=2), sockets)
    finally:
        sockets[0].close()
