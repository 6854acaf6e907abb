"""``trawl serve`` and ``trawl demo`` on a port another process holds: one line naming it, a free
port to use instead, and nothing announced or loaded first (uvicorn's ``[Errno 98]`` came
after "Trawl is serving … at http://…")."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cli.ports import bind_error
from tests.fixtures.cli import run_trawl


@contextmanager
def held_port() -> Iterator[int]:
    """A port a real socket listens on, for as long as the block runs."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def _suggested(line: str, flag: str) -> int:
    match = re.search(rf"e\.g\. {flag} (\d+)$", line)
    assert match is not None, line
    return int(match.group(1))


def test_serve_on_a_taken_port_says_so_before_serving_or_loading(tmp_path: Path) -> None:
    missing_index = tmp_path / "no-index-here"  # the port is checked before the index is looked at
    with held_port() as busy:
        done = run_trawl("serve", "--index", str(missing_index), "--port", str(busy), timeout=120)
        output = done.stdout + done.stderr
        assert done.returncode == 2, output
        assert "is serving" not in output
        (line,) = [x for x in output.splitlines() if x.strip()]
        assert line.startswith(f"error: port {busy} is in use on 127.0.0.1"), line
        suggested = _suggested(line, "--port")
        assert suggested != busy
        assert bind_error("127.0.0.1", suggested) is None


def test_the_demo_never_suggests_its_own_site_port(tmp_path: Path) -> None:
    with held_port() as busy:
        site_port = busy + 1  # the first port a near-by suggestion would try
        assert bind_error("127.0.0.1", site_port) is None, "the site port must be free for this test"
        done = run_trawl(
            "demo",
            "--site",
            str(tmp_path),
            "--data",
            str(tmp_path / "d"),
            "--port",
            str(busy),
            "--site-port",
            str(site_port),
            timeout=120,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 2, output
        (line,) = [x for x in output.splitlines() if x.strip()]
        assert line.startswith(f"error: port {busy} is in use"), line
        suggested = _suggested(line, "--port")
        assert suggested not in {busy, site_port}
        assert bind_error("127.0.0.1", suggested) is None
    assert not (tmp_path / "d").exists()  # nothing was crawled
