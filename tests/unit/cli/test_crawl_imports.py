"""What a ``trawl crawl`` worker imports: never the serving, indexing or model stacks.

A crawl worker's resident memory starts with what it imports, and a fleet runs many
workers, so the module set of a real (tiny) crawl is checked in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_CRAWL_ONE_PAGE = r"""
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Page(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<html><head><title>t</title></head><body><p>one page</p></body></html>"
        self.send_response(200 if self.path == "/" else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
threading.Thread(target=server.serve_forever, daemon=True).start()
from cli.main import app
seed = f"http://127.0.0.1:{server.server_address[1]}/"
args = ["crawl", seed, "--data", sys.argv[1], "--allow-loopback", "--delay-s", "0", "--no-progress", "--json"]
try:
    app(args, standalone_mode=False)
finally:
    server.shutdown()
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""

_NEVER = frozenset(
    {
        "api", "fastapi", "uvicorn", "tantivy", "torch", "sentence_transformers", "transformers",
        "retrieval", "rerank", "training", "lightgbm", "pyarrow", "psycopg", "prometheus_client",
    }
)  # fmt: skip
"""Serving, indexing, models; psycopg only for a PostgreSQL frontier, prometheus_client only
with ``--metrics-port``."""


def test_a_crawl_imports_no_serving_index_or_model_stack(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _CRAWL_ONE_PAGE, str(tmp_path / "crawl")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.strip().splitlines()
    summary, modules = json.loads(lines[-2]), set(json.loads(lines[-1]))
    assert summary["pages"] == 1  # the crawl ran, so its whole code path was imported
    assert "crawl" in modules and "httpx" in modules
    assert sorted(modules & _NEVER) == []
