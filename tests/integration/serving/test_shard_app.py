"""The shard app in-process: endpoints that call the index are plain functions."""

from __future__ import annotations

import inspect
from pathlib import Path

from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from core.settings import SearchSettings
from retrieval.index.root import IndexRoot
from retrieval.remote.shard_http import create_shard_app, query_to_wire
from retrieval.text.analyzer import parse_query
from tests.fixtures.docs import SMALL_WEB

INDEX_ROUTES = {"/shard/info", "/shard/doc_freqs", "/shard/candidates", "/shard/fetch"}


def test_index_endpoints_run_in_the_thread_pool(tmp_path: Path) -> None:
    """Tantivy and hnswlib block: FastAPI runs plain ``def`` endpoints in its thread pool,
    ``async def`` ones on the event loop, where one slow query would stall the process."""
    root = IndexRoot(tmp_path / "index")
    root.publish(root.build(SMALL_WEB))
    app = create_shard_app(root.root, 0, SearchSettings(use_vectors=False))
    routes = {r.path: r for r in app.routes if isinstance(r, APIRoute)}
    assert INDEX_ROUTES <= routes.keys()
    assert [p for p in sorted(INDEX_ROUTES) if inspect.iscoroutinefunction(routes[p].endpoint)] == []
    with TestClient(app) as client:
        response = client.post("/shard/doc_freqs", json={"query": query_to_wire(parse_query("search"))})
        assert response.status_code == 200 and response.json()["df"]
        assert client.get("/shard/info").json()["num_docs"] == len(SMALL_WEB)
