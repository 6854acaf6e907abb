"""Whether a port can be listened on, and a free one to suggest, found by binding.

``trawl serve`` and ``trawl demo`` check their ports before they announce or load
anything: uvicorn would fail with ``[Errno 98] address already in use`` only after the
index had loaded and "serving at …" had been printed. The probe binds as uvicorn does
(``SO_REUSEADDR``), so a port another server listens on is taken and one in TIME_WAIT is not.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Collection

__all__ = ["bind_error", "free_port", "port_taken_message"]

NEAR = 20
"""Ports above the asked one tried first for a suggestion (``--port 8001`` reads better than 41873)."""


def bind_error(host: str, port: int) -> OSError | None:
    """Why ``host:port`` cannot be bound now (``errno.EADDRINUSE``: taken), or None when it can."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:  # socket.gaierror (an unknown host name) included
            return exc
    return None


def free_port(host: str = "127.0.0.1", *, near: int | None = None, avoid: Collection[int] = ()) -> int:
    """A port that binds on ``host`` now and is not in ``avoid`` (ports the caller will use itself).

    Tries the ``NEAR`` ports above ``near`` first, then lets the system pick.
    """
    if near is not None:
        for port in range(near + 1, min(near + 1 + NEAR, 65536)):
            if port not in avoid and bind_error(host, port) is None:
                return port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    while True:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        if port not in avoid:
            return port


def port_taken_message(
    host: str, port: int, problem: OSError, *, flag: str = "--port", avoid: Collection[int] = ()
) -> str:
    """One line for a port that cannot be listened on: a taken one gets a free one to use instead."""
    if problem.errno != errno.EADDRINUSE:
        return f"cannot listen on {host}:{port}: {problem.strerror or problem}"
    suggestion = free_port(host, near=port, avoid={port, *avoid})
    return (
        f"port {port} is in use on {host} (another trawl or server?): stop it, "
        f"or pass {flag} N with a free port, e.g. {flag} {suggestion}"
    )
