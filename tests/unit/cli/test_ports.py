"""The port probe ``trawl serve`` and ``trawl demo`` run first, on real sockets."""

from __future__ import annotations

import errno
import re
import socket

from cli.ports import bind_error, free_port, port_taken_message


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def test_a_listening_port_is_taken_and_a_closed_one_is_free() -> None:
    with _listening() as held:
        port = held.getsockname()[1]
        problem = bind_error("127.0.0.1", port)
        assert problem is not None and problem.errno == errno.EADDRINUSE
    assert bind_error("127.0.0.1", port) is None


def test_a_free_port_binds_and_is_none_of_the_avoided() -> None:
    with _listening() as held:
        port = held.getsockname()[1]
        avoid = {port, port + 1, port + 2}
        found = free_port(near=port, avoid=avoid)
        assert found not in avoid
        assert bind_error("127.0.0.1", found) is None


def test_the_message_names_the_port_and_suggests_a_free_one_outside_the_set() -> None:
    with _listening() as held:
        port = held.getsockname()[1]
        problem = bind_error("127.0.0.1", port)
        assert problem is not None
        line = port_taken_message("127.0.0.1", port, problem, flag="--port", avoid={port + 1})
        assert line.startswith(f"port {port} is in use on 127.0.0.1") and "\n" not in line
        match = re.search(r"e\.g\. --port (\d+)$", line)
        assert match is not None, line
        suggested = int(match.group(1))
        assert suggested not in {port, port + 1}
        assert bind_error("127.0.0.1", suggested) is None


def test_an_unknown_host_is_not_called_a_busy_port() -> None:
    problem = bind_error("nosuch.invalid", 8000)
    assert problem is not None
    line = port_taken_message("nosuch.invalid", 8000, problem)
    assert line.startswith("cannot listen on nosuch.invalid:8000")
