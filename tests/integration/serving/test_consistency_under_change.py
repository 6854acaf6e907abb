"""Serving stays consistent while the index changes under it and shards fail.

Each test reproduces a bug found in review of the served path (each failed on the code
before its fix): cursors that lose their filters or switch lists after an update or a
publish, answers cached from a view an update replaced, a publish closing a generation
under a running search, totals that count a document twice, a document of a failed
shard reported as absent, and a hung shard costing a deadline per gathering round.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.errors import QueryError
from core.settings import SearchSettings
from core.types import Document
from retrieval.index.build import build_index
from retrieval.index.incremental import IncrementalIndexer
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.text.analyzer import parse_query
from tests.fixtures.docs import SMALL_WEB, make_doc

DATASTRUCTURES = "https://docs.python.org/3/tutorial/datastructures.html"
FUNCTIONS = "https://docs.python.org/3/library/functions.html"


@pytest.fixture
def two_shards(tmp_path: Path) -> SearchService:
    index = tmp_path / "index"
    build_index(SMALL_WEB, index, shards=2)
    service = SearchService.open(index, SearchSettings(use_vectors=False, spelling=False))
    yield service
    service.close()


def test_cursor_keeps_the_filters_it_was_made_with(two_shards: SearchService) -> None:
    """A cursor pins query, ranker and generation, but not site/lang/filetype: following
    ``next_cursor`` alone (what a client does) continues a *different* ranked list."""
    service = two_shards
    first = service.search(SearchRequest("list", size=1, site="docs.python.org"))
    assert [h.url for h in first.hits] == [DATASTRUCTURES] and first.total == 2
    assert first.next_cursor is not None
    second = service.search(SearchRequest(cursor=first.next_cursor))
    # page 2 of the filtered list is functions.html; the bug serves page 2 of the unfiltered
    # list (6 results), which repeats datastructures.html from page 1.
    assert second.total == first.total
    assert [h.url for h in second.hits] == [FUNCTIONS]


def test_cursor_cannot_be_replayed_under_another_filter(two_shards: SearchService) -> None:
    service = two_shards
    first = service.search(SearchRequest("list", size=1, site="docs.python.org"))
    assert first.next_cursor is not None
    with pytest.raises(QueryError, match="site cannot change while following a cursor"):
        service.search(SearchRequest(cursor=first.next_cursor, site="example.org"))
    # The same filter beside the cursor is no change.
    same = service.search(SearchRequest(cursor=first.next_cursor, site="docs.python.org"))
    assert [h.url for h in same.hits] == [FUNCTIONS]


def test_a_hit_lost_at_fetch_makes_the_page_partial_and_uncached(two_shards: SearchService) -> None:
    """``_hits`` drops a hit whose shard failed the fetch ("the response is partial") but
    the response says partial=False, names no missing shard and is cached."""
    service = two_shards
    broker = service.generation.broker
    complete = service.search(SearchRequest("list", size=10))
    assert len(complete.hits) == 6
    service.cache.clear()
    victim = broker.shards[1][0]
    real_fetch = victim.fetch
    calls = {"n": 0}

    def failing_fetch(doc_ids, *, timeout_s=None):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        raise OSError("shard 1 died between ranking and fetching")

    victim.fetch = failing_fetch  # type: ignore[method-assign]
    try:
        broken = service.search(SearchRequest("list", size=10))
    finally:
        victim.fetch = real_fetch  # type: ignore[method-assign]
    assert calls["n"] >= 1
    assert len(broken.hits) < len(complete.hits)  # hits were lost
    assert broken.partial, "hits were dropped, but the response claims to be complete"
    again = service.search(SearchRequest("list", size=10))  # the shard is healthy again
    assert not again.cached and len(again.hits) == 6, "the incomplete page was cached"


def _updatable(tmp_path: Path) -> tuple[Path, IncrementalIndexer, SearchService]:
    """A crawl's documents indexed by the incremental indexer (which updates in place),
    and a service over that index."""
    data = tmp_path / "crawl"
    DocStore(CrawlDir(data).docs).append([dataclasses.replace(d, fetched_at=100.0) for d in SMALL_WEB])
    indexer = IncrementalIndexer(data, tmp_path / "index", shards=2)
    indexer.compact()
    return (
        data,
        indexer,
        SearchService.open(tmp_path / "index", SearchSettings(use_vectors=False, spelling=False)),
    )


def test_in_place_update_during_a_search_does_not_leave_a_stale_cache_entry(tmp_path: Path) -> None:
    """An in-place update reopens the generation under the *same id* and clears the cache;
    a search that started on the old one puts its answer back afterwards, under a key that
    the updated generation shares, so the update is invisible until the TTL runs out."""
    data, indexer, service = _updatable(tmp_path)
    try:
        new = make_doc("https://example.org/zebra", "Zebra", "zebra zebra quasar", lang="en")
        real_ranked = service.retriever.ranked
        done = {"update": False}

        def ranked_then_update(*args, **kwargs):  # type: ignore[no-untyped-def]
            out = real_ranked(*args, **kwargs)
            if not done["update"]:
                done["update"] = True
                # Meanwhile: the indexer commits, and another request's refresh reopens.
                DocStore(CrawlDir(data).docs).append([dataclasses.replace(new, fetched_at=200.0)])
                assert indexer.step() is not None
                service.generations.refresh()
            return out

        service.retriever.ranked = ranked_then_update  # type: ignore[method-assign]
        before = service.search(SearchRequest("zebra"))
        assert before.total == 0
        service.retriever.ranked = real_ranked  # type: ignore[method-assign]
        after = service.search(SearchRequest("zebra"))
        assert after.total == 1, f"stale answer served from the cache (cached={after.cached})"
    finally:
        service.close()


def test_cursor_survives_an_in_place_update_without_repeating(tmp_path: Path) -> None:
    """The cursor is pinned to a generation *id*; an in-place update keeps the id and changes
    the ranked list, so following a cursor repeats (or skips) results."""
    data, indexer, service = _updatable(tmp_path)
    try:
        first = service.search(SearchRequest("list", size=2))
        assert first.next_cursor is not None
        shown = [h.url for h in first.hits]
        top = make_doc("https://example.org/list-top", "List list", "list " * 40, lang="en")
        DocStore(CrawlDir(data).docs).append([dataclasses.replace(top, fetched_at=200.0)])
        assert indexer.step() is not None
        second = service.search(SearchRequest(cursor=first.next_cursor))
        repeated = set(shown) & {h.url for h in second.hits}
        assert not repeated, f"following the cursor repeated {repeated}"
    finally:
        service.close()


def test_cursor_over_remote_shards_reads_the_generation_it_was_made_on(tmp_path: Path) -> None:
    """With ``trawl shard serve`` processes, every opened generation of the front end is a
    broker over the *same* shard clients, and each shard process follows ``CURRENT`` on its
    own: a cursor pinned to the previous generation is answered from the new one (the
    shard's reply names its generation, and the client ignores it)."""
    from fastapi.testclient import TestClient

    from retrieval.index.root import IndexRoot
    from retrieval.remote.shard_http import HttpShard, create_shard_app

    root = IndexRoot(tmp_path / "index")
    old = root.build(SMALL_WEB)
    root.publish(old)
    settings = SearchSettings(use_vectors=False, spelling=False)
    app = create_shard_app(root.root, 0, settings)
    with TestClient(app, base_url="http://shard0") as client:
        shard = HttpShard("http://shard0", client=client)
        service = SearchService.open(root.root, settings, remote=[[shard]])
        try:
            first = service.search(SearchRequest("list", size=2))
            assert first.generation == old and first.next_cursor is not None
            shown = [h.url for h in first.hits]
            top = make_doc("https://example.org/list-top", "List list", "list " * 40, lang="en")
            new = root.build([*SMALL_WEB, top])
            root.publish(new)
            second = service.search(SearchRequest(cursor=first.next_cursor))
            assert second.generation == old  # the response says: the old generation
            urls = [h.url for h in second.hits]
            assert top.url not in urls, "a document of the new generation on a page of the old one"
            assert not set(shown) & set(urls), f"following the cursor repeated {set(shown) & set(urls)}"
        finally:
            service.close()


def test_a_publish_during_a_search_does_not_fail_it(tmp_path: Path) -> None:
    """``GenerationSet.refresh`` closes the generations it drops (``open_generations``) at
    once, though searches that picked them up are still running: their next fan-out hits a
    shut-down thread pool and a RuntimeError escapes (a 500 through the API)."""
    from core.errors import TrawlError
    from retrieval.index.root import IndexRoot

    root = IndexRoot(tmp_path / "index")
    root.publish(root.build(SMALL_WEB, shards=2))
    service = SearchService.open(
        root.root, SearchSettings(use_vectors=False, spelling=False, open_generations=1)
    )
    try:
        real = service.rankers.query_vector
        fired = {"done": False}

        def publish_meanwhile(*args, **kwargs):  # type: ignore[no-untyped-def]
            if not fired["done"]:
                fired["done"] = True
                root.publish(root.build(SMALL_WEB, shards=2))
                service.generations.refresh()  # another request's refresh
            return real(*args, **kwargs)

        service.rankers.query_vector = publish_meanwhile  # type: ignore[method-assign]
        try:
            response = service.search(SearchRequest("list"))
        except TrawlError:
            return  # a 4xx/5xx with a message would be acceptable
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"{type(exc).__name__} escaped (HTTP 500): {exc}")
        assert response.total == 6
    finally:
        service.close()


def _reports(n: int) -> tuple[Document, ...]:
    """``n`` documents that all match "report", in five topics."""
    return tuple(
        make_doc(
            f"https://example.org/r/{i}", f"Report {i}", f"report number {i} on topic {i % 5}", lang="en"
        )
        for i in range(n)
    )


@pytest.fixture(scope="module")
def embedder():  # type: ignore[no-untyped-def]
    from retrieval.vectors.embed import Embedder

    return Embedder()


def _vector_service(tmp_path: Path, embedder, docs, **settings):  # type: ignore[no-untyped-def]
    from core.settings import EmbedSettings
    from retrieval.index.root import IndexRoot
    from retrieval.vectors.backfill import backfill_index

    root = IndexRoot(tmp_path / "index")
    generation = root.build(docs)
    backfill_index(root.path_of(generation), embedder, EmbedSettings())
    root.publish(generation)
    return SearchService.open(
        root.root,
        SearchSettings(spelling=False, **settings),
        encoder=embedder.encode_query,
        encoder_model=embedder.model_id,
    )


def test_cache_key_covers_what_the_query_encoder_sees(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    """``normalized`` drops word order (and case, and stems) because "no ranker" depends on
    them, but the vector rankers encode ``query.positive_text``, which does: two queries
    with different vectors share one cache entry, and the second gets the first's answer."""
    service = _vector_service(tmp_path, embedder, SMALL_WEB)
    try:
        assert "dense" in service.ranker_names()
        a = service.search(SearchRequest("list comprehension", ranker="dense"))
        b = service.search(SearchRequest("comprehension list", ranker="dense"))
        service.cache.clear()
        fresh = service.search(SearchRequest("comprehension list", ranker="dense"))
        assert [h.score for h in a.hits] != [h.score for h in fresh.hits]  # the vectors differ
        assert [(h.doc_id, h.score) for h in b.hits] == [(h.doc_id, h.score) for h in fresh.hits], (
            f"served from the cache entry of another vector (cached={b.cached})"
        )
    finally:
        service.close()


def test_dense_total_and_cursor_match_what_dense_can_list(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    """The dense ranker lists only tier 0's vector candidates, yet ``total`` counts every
    lexical match, ``next_cursor`` is offered, and deeper pages run every lexical tier."""
    docs = _reports(60)
    service = _vector_service(tmp_path, embedder, docs, candidate_k=10)
    try:
        broker = service.generation.broker
        windows: list[int] = []
        real = broker.gather

        def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
            windows.append(kwargs["k_lexical"])
            return real(*args, **kwargs)

        broker.gather = counting  # type: ignore[method-assign]
        first = service.search(SearchRequest("report", ranker="dense", size=10))
        listed = len(first.hits)
        follow = service.search(SearchRequest(cursor=first.next_cursor)) if first.next_cursor else None
        assert first.total <= 10 + 1, f"total={first.total} but dense can list at most candidate_k"
        assert follow is None or follow.hits, "next_cursor led to an empty page"
        assert first.total == listed, "the total counts documents dense does not list"
        assert set(windows) == {10}, f"dense widened the lexical window it never ranks: {windows}"
    finally:
        service.close()


def test_document_of_a_failed_shard_is_not_reported_as_not_found(two_shards: SearchService) -> None:
    """``SearchService.document`` turns a shard that failed the fetch into "no such document"
    (``GET /v1/documents/{id}`` answers 404 not_found instead of 503)."""
    from core.errors import IndexStateError

    service = two_shards
    hit = service.search(SearchRequest("list", size=10)).hits[0]
    broker = service.generation.broker
    owner = next(
        i for i, r in enumerate(broker.shards) if hit.doc_id in r[0].lexical.stored_many([hit.doc_id])
    )
    victim = broker.shards[owner][0]

    def failing_fetch(doc_ids, *, timeout_s=None):  # type: ignore[no-untyped-def]
        raise OSError("shard down")

    victim.fetch = failing_fetch  # type: ignore[method-assign]
    with pytest.raises(IndexStateError):
        doc = service.document(hit.doc_id)
        assert doc is not None, "a document of a failed shard reads as not found (404)"


def test_hybrid_total_counts_each_document_once(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    """``ranked`` adds the "vector-only" candidates (bm25 None) to ``lexical_total``, but a
    vector hit that matches lexically below the lexical top-k also has bm25 None: it is
    counted twice, and ``total`` can exceed the number of documents in the index."""
    docs = _reports(60)
    # A deadline no loaded machine reaches: a spent budget cuts the ranked list short (by design).
    service = _vector_service(tmp_path, embedder, docs, candidate_k=10, deadline_s=60.0)
    try:
        response = service.search(SearchRequest("report", ranker="hybrid", size=10))
        assert response.total <= service.num_docs == 60, f"total={response.total} of 60 documents"
        pages = [response]
        while pages[-1].next_cursor:
            pages.append(service.search(SearchRequest(cursor=pages[-1].next_cursor)))
        listed = [h.doc_id for p in pages for h in p.hits]
        assert len(listed) == len(set(listed)) == response.total, (len(listed), response.total)
    finally:
        service.close()


def test_a_hung_shard_costs_one_deadline_not_one_per_tier(tmp_path: Path, embedder) -> None:  # type: ignore[no-untyped-def]
    """Every tier of a fused ranker's list is its own ``broker.gather`` with a full
    ``deadline_s`` (and the page's fetch another): with one hung shard a deep page waits
    the deadline once per tier."""
    import time

    from core.settings import EmbedSettings
    from retrieval.index import layout
    from retrieval.index.generation import open_vectors
    from retrieval.index.lexical import LexicalShard
    from retrieval.index.root import IndexRoot
    from retrieval.query.shard_backend import LocalShard
    from retrieval.vectors.backfill import backfill_index

    docs = _reports(120)
    root = IndexRoot(tmp_path / "index")
    generation = root.build(docs, shards=2)
    path = root.path_of(generation)
    backfill_index(path, embedder, EmbedSettings())
    root.publish(generation)
    local = [
        LocalShard(i, LexicalShard(layout.lexical_dir(path, i)), open_vectors(path, i)) for i in range(2)
    ]

    class Hung:
        """Shard 1, answering nothing but the statistics in time."""

        def __init__(self, inner: LocalShard) -> None:
            self.inner, self.shard_id = inner, inner.shard_id

        num_docs = property(lambda self: self.inner.num_docs)
        vector_model = property(lambda self: self.inner.vector_model)

        def doc_freqs(self, query, *, timeout_s=None):  # type: ignore[no-untyped-def]
            return self.inner.doc_freqs(query)

        def candidates(self, request, *, timeout_s=None):  # type: ignore[no-untyped-def]
            time.sleep(5)
            return self.inner.candidates(request)

        def annotate(self, request, *, timeout_s=None):  # type: ignore[no-untyped-def]
            return self.inner.annotate(request)

        def fetch(self, doc_ids, *, timeout_s=None):  # type: ignore[no-untyped-def]
            return self.inner.fetch(doc_ids)

    # Page 5 needs three gathering rounds and a fetch: a deadline each took ~4 deadlines.
    deadline = 0.5
    service = SearchService.open(
        root.root,
        SearchSettings(spelling=False, candidate_k=10, deadline_s=deadline, hedge=False),
        encoder=embedder.encode_query,
        encoder_model=embedder.model_id,
        remote=[[local[0]], [Hung(local[1])]],
    )
    try:
        started = time.perf_counter()
        response = service.search(SearchRequest("report", ranker="hybrid", page=5, size=10))
        took = time.perf_counter() - started
        assert response.partial
        assert took < 3 * deadline, f"one search took {took:.2f} s with deadline_s={deadline}"
    finally:
        service.close()


def test_a_shard_process_serves_an_older_generation_and_refuses_a_gone_one(tmp_path: Path) -> None:
    """A broker pins its calls to its generation: the shard process answers from it after
    a publish, and a generation no longer on disk is a 409 (the broker's missing shard),
    never an answer from another generation."""
    from fastapi.testclient import TestClient

    from retrieval.index.root import IndexRoot
    from retrieval.remote.shard_http import create_shard_app, query_to_wire

    root = IndexRoot(tmp_path / "index")
    old = root.build(SMALL_WEB)
    root.publish(old)
    app = create_shard_app(root.root, 0, SearchSettings(use_vectors=False, spelling=False))
    body = {"query": query_to_wire(parse_query("list")), "k_lexical": 10, "k_vector": 0}
    with TestClient(app) as client:
        before = client.post("/shard/candidates", json={**body, "generation": old}).json()
        new = root.build([*SMALL_WEB, make_doc("https://example.org/list-top", "List", "list " * 40)])
        root.publish(new)
        pinned = client.post("/shard/candidates", json={**body, "generation": old}).json()
        latest = client.post("/shard/candidates", json=body).json()
        gone = client.post("/shard/candidates", json={**body, "generation": "g-not-there"})
    assert pinned["generation"] == old and pinned["candidates"] == before["candidates"]
    assert latest["generation"] == new and latest["lexical_total"] == before["lexical_total"] + 1
    assert gone.status_code == 409 and "g-not-there" in gone.json()["detail"]


def test_a_generation_keeps_one_view_before_its_latest_update(tmp_path: Path) -> None:
    """Each view holds its own shards (HNSW copies included): a cursor survives one in-place
    update, and after a second one its view is closed and the cursor says so (a 400)."""
    data, indexer, service = _updatable(tmp_path)

    def update(url: str, at: float) -> None:
        doc = make_doc(url, "List", "list " * 30, lang="en")
        DocStore(CrawlDir(data).docs).append([dataclasses.replace(doc, fetched_at=at)])
        assert indexer.step() is not None

    try:
        first = service.search(SearchRequest("list", size=2))
        update("https://example.org/list-a", 200.0)
        second = service.search(SearchRequest("list", size=2))
        assert second.total == first.total + 1  # the update is served...
        assert first.next_cursor and second.next_cursor
        assert service.search(SearchRequest(cursor=first.next_cursor)).hits  # ...and the view before it
        update("https://example.org/list-b", 300.0)
        assert service.search(SearchRequest("list", size=2)).total == first.total + 2
        with pytest.raises(QueryError, match="no longer served"):
            service.search(SearchRequest(cursor=first.next_cursor))
        assert service.search(SearchRequest(cursor=second.next_cursor)).hits
    finally:
        service.close()
