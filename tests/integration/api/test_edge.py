"""The server's edge: a URL too long for the HTTP parser answers 414 in the API's JSON shape.

uvicorn's httptools parser refuses a request target over 65,535 bytes, and uvicorn answered
it with a plain-text 400 ("Invalid HTTP request received.") before the API's own 414 could.
Checked against a real ``trawl serve`` process, through a raw socket (HTTP clients refuse
to send such URLs), and against the tests' server thread, which runs the same settings.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.types import Document, doc_id_for
from retrieval.index.root import IndexRoot
from tests.conftest import ServerThread
from tests.fixtures.cli import REPO

API_LIMIT = 32_768
"""``api.max_request_bytes`` of the served process: under the parser's limit, so both answer."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ask(port: int, target: bytes) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of ``GET target`` sent by hand."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        conn.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: trawl.test\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = IndexRoot(tmp_path_factory.mktemp("edge") / "index")
    docs = [
        Document(doc_id=doc_id_for("http://a.test/"), url="http://a.test/", title="Edge", body="edge page")
    ]
    root.publish(root.build(docs, shards=1))
    return root.root


@pytest.fixture(scope="module")
def trawl_serve(index: Path) -> Iterator[int]:
    """``trawl serve`` in its own process; yields its port once it answers /healthz."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "serve", "--index", str(index), "--port", str(port)],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRAWL_API__MAX_REQUEST_BYTES": str(API_LIMIT)},
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None, "trawl serve exited"
            assert time.monotonic() < deadline, "trawl serve did not answer /healthz"
            time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=60)


@pytest.mark.parametrize("size", [70_000, 2_000_000])
def test_a_url_too_long_to_parse_is_414_json(trawl_serve: int, size: int) -> None:
    status, headers, body = _ask(trawl_serve, b"/v1/search?q=" + b"x" * size)
    assert status == 414, body[:200]
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"error": "uri_too_long", "detail": "The URL exceeds 65535 bytes."}
    assert _ask(trawl_serve, b"/healthz")[0] == 200  # the server carries on


def test_a_url_over_the_setting_but_parseable_is_414_from_the_api(trawl_serve: int) -> None:
    """Under the parser's limit, the API's own limit (``api.max_request_bytes``) answers alike."""
    status, _, body = _ask(trawl_serve, b"/v1/search?q=" + b"x" * 40_000)
    assert (status, json.loads(body)) == (
        414,
        {"error": "uri_too_long", "detail": f"The URL exceeds {API_LIMIT} bytes."},
    )


def test_the_tests_server_runs_what_trawl_serve_runs(index: Path) -> None:
    from api.app import create_app
    from core.settings import Settings

    with ServerThread(create_app(Settings(), index_dir=index)) as server:
        status, _, body = _ask(server.port, b"/v1/search?q=" + b"x" * 70_000)
    assert (status, json.loads(body)["error"]) == (414, "uri_too_long")
