"""Shipping a shard to a node's own folder: the copy opens and answers as the original, each
file crosses once per node, and a file that changed in transit is refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from core.errors import ManifestError
from core.settings import SearchSettings
from retrieval.index import layout
from retrieval.index.generation import open_shard
from retrieval.index.lexical_query import FieldBoosts
from retrieval.index.root import IndexRoot
from retrieval.query.shard_backend import LocalShard
from retrieval.ray_serve.shipping import IndexSource, NodeStore, ShardFile
from retrieval.text.analyzer import parse_query
from tests.fixtures.docs import SMALL_WEB


@pytest.fixture
def index(tmp_path: Path) -> IndexRoot:
    root = IndexRoot(tmp_path / "index")
    root.publish(root.build(SMALL_WEB, shards=2))
    return root


def open_local(path: Path, shard: int) -> LocalShard:
    settings = SearchSettings()
    local, damage = open_shard(path, shard, settings, FieldBoosts.from_settings(settings))
    assert damage == [] and isinstance(local, LocalShard)
    return local


def test_a_shipped_shard_answers_as_the_original(index: IndexRoot, tmp_path: Path) -> None:
    source = IndexSource(str(index.root))
    generation, _ = source.published()
    store = NodeStore(tmp_path / "node")
    listing = source.listing(generation, 1)
    path = store.materialize(listing, 1, source.read)
    assert path.is_relative_to(tmp_path / "node") and layout.is_index(path)
    assert not layout.shard_dir(path, 0).exists()  # only the shard it serves
    query = parse_query("python list")
    original = open_local(index.path_of(generation), 1)
    shipped = open_local(path, 1)
    assert shipped.doc_freqs(query) == original.doc_freqs(query)
    ids = list(original.lexical.stored_many([]).keys())
    assert ids == list(shipped.lexical.stored_many([]).keys())


def test_each_file_crosses_once_per_node(index: IndexRoot, tmp_path: Path) -> None:
    source = IndexSource(str(index.root))
    generation, _ = source.published()
    store = NodeStore(tmp_path / "node")
    listing = source.listing(generation, 0)
    store.materialize(listing, 0, source.read)
    first = store.received_bytes
    assert first == sum({f.digest: f.size for f in listing.files}.values())  # identical files: once
    again = NodeStore(tmp_path / "node")  # a replica restarted on the same node
    again.materialize(listing, 0, source.read)
    assert again.received_bytes == 0
    # The next generation of the same documents: only what differs travels.
    later = index.build(SMALL_WEB, shards=2)
    relisted = source.listing(later, 0)
    again.materialize(relisted, 0, source.read)
    same = {f.digest for f in listing.files} & {f.digest for f in relisted.files}
    assert same  # unchanged files (e.g. the Tantivy segments' stores) are not sent again
    assert again.received_bytes == sum(
        {f.digest: f.size for f in relisted.files if f.digest not in same}.values()
    )


def test_a_file_changed_in_transit_is_refused(index: IndexRoot, tmp_path: Path) -> None:
    source = IndexSource(str(index.root))
    generation, _ = source.published()
    listing = source.listing(generation, 0)
    bad = dataclasses.replace(
        listing, files=tuple(ShardFile(f.path, f.size, "0" * 64) for f in listing.files)
    )
    store = NodeStore(tmp_path / "node")
    with pytest.raises(ManifestError, match="changed while it was shipped"):
        store.materialize(bad, 0, source.read)
    assert not any(store.views.glob("*-s0"))  # nothing half-made is served
    with pytest.raises(ManifestError, match="not a file of generation"):
        source.read(generation, "../../etc/passwd", 0, 10)


def test_a_view_a_replica_holds_is_never_removed(index: IndexRoot, tmp_path: Path) -> None:
    """Replicas of every shard on a machine share its folder: one's clean-up must not remove
    the files another serves (seen: shard 0's replica deleted shard 1's view, and shard 1's
    learned-ranker calls failed once it read a file it had not opened yet)."""
    source = IndexSource(str(index.root))
    generation, _ = source.published()
    first, second = NodeStore(tmp_path / "node"), NodeStore(tmp_path / "node")
    views = []
    pins = []
    for shard, store in ((0, first), (1, second)):
        listing = source.listing(generation, shard)
        pins.append(store.hold(store.view_dir(listing, shard)))
        views.append(store.materialize(listing, shard, source.read))
    first.forget()
    second.forget()
    assert all(layout.is_index(v) for v in views)
    NodeStore.release(pins[1])
    first.forget()
    assert layout.is_index(views[0]) and not views[1].exists()
    NodeStore.release(pins[0])
