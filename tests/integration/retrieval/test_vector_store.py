"""Vectors reused across generations: a recrawl encodes only what changed; GC keeps what is retained."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from core.settings import EmbedSettings, SearchSettings
from core.types import Document, doc_id_for
from retrieval.index.generation import Generation
from retrieval.index.layout import generation_dir, passages_file, version_dir
from retrieval.index.root import IndexRoot
from retrieval.vectors.backfill import (
    backfill_index,
    backfill_new_generation,
    collect_garbage,
    open_vector_shard,
)
from retrieval.vectors.embed import Embedder
from retrieval.vectors.store import VectorStore, passage_hashes

WORDS = ("wing", "shock", "nozzle", "plate", "jet", "flutter", "heat", "cone", "slot", "panel")


def page(i: int, edition: int = 0) -> Document:
    url = f"https://example.org/p/{i}"
    topic = WORDS[i % len(WORDS)]
    # 200 words: two passages each (160-word windows every 120 words), one of which
    # changes when only the tail of the page is edited.
    body = " ".join(f"{topic} {i} note {j}" for j in range(50))
    if edition:
        body += f" revised in edition {edition} with new {topic} results"
    return Document(doc_id=doc_id_for(url), url=url, title=f"Page {i}", body=body)


class CountingEmbedder:
    """The real Embedder, with every text that reaches ``encode`` counted."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner = embedder
        self.texts: list[str] = []
        self.calls = 0
        real = embedder.encode

        def encode(texts: Sequence[str]) -> np.ndarray:
            self.calls += 1
            self.texts.extend(texts)
            return real(texts)

        embedder.encode = encode  # type: ignore[method-assign]

    def reset(self) -> None:
        self.texts.clear()
        self.calls = 0


@pytest.fixture(scope="module")
def counting() -> CountingEmbedder:
    return CountingEmbedder(Embedder())


def store_of(root: Path, embedder: Embedder) -> VectorStore:
    return VectorStore.for_root(root, embedder.model_id)


def hashes_of(docs: list[Document], embedder: Embedder) -> set[int]:
    texts = [p for d in docs for p in embedder.passages(d.title, d.body)]
    return set(passage_hashes(texts, embedder.max_seq_length).tolist())


def test_a_recrawl_encodes_only_the_passages_of_changed_pages(
    tmp_path: Path, counting: CountingEmbedder
) -> None:
    embedder = counting.inner
    root = IndexRoot(tmp_path / "index")
    first = [page(i) for i in range(100)]
    g1 = root.build(first, source="crawl-1")
    counting.reset()
    report1 = backfill_index(generation_dir(root.root, g1), embedder, EmbedSettings(), chunk_docs=40)
    assert report1.encoded == len(counting.texts) == len(hashes_of(first, embedder)) == 200
    root.publish(g1)

    changed = set(range(0, 100, 20))  # 5% of the pages were edited by the "recrawl"
    second = [page(i, edition=1 if i in changed else 0) for i in range(100)]
    g2 = root.build(second, source="crawl-2")
    counting.reset()
    report2 = backfill_index(generation_dir(root.root, g2), embedder, EmbedSettings(), chunk_docs=40)

    edited = [d for d in second if int(d.url.rsplit("/", 1)[1]) in changed]
    new_texts = [p for d in edited for p in embedder.passages(d.title, d.body)]
    new_texts = [
        t for t in new_texts if t not in {p for d in first for p in embedder.passages(d.title, d.body)}
    ]
    assert sorted(counting.texts) == sorted(new_texts)  # only the changed pages' changed passages
    assert 0 < len(counting.texts) <= 2 * len(changed)
    assert (report2.embedded, report2.encoded, report2.linked) == (5, len(new_texts), 200 - len(new_texts))
    # The new generation serves all its pages, edited ones with their new text.
    shard = open_vector_shard(generation_dir(root.root, g2), 0, model_id=embedder.model_id)
    assert shard.num_docs == 100 and shard.num_rows == 200
    probe = edited[2]
    own = embedder.encode([embedder.passages(probe.title, probe.body)[-1]])[0]
    assert shard.search(own, 1)[0].doc_id == probe.doc_id
    generation = Generation.open(generation_dir(root.root, g2), SearchSettings())
    assert generation.has_vectors and generation.vector_model == embedder.model_id
    generation.close()

    counting.reset()
    again = backfill_index(generation_dir(root.root, g2), embedder, EmbedSettings())
    assert counting.calls == 0 and again.encoded == 0


def test_gc_keeps_exactly_the_vectors_of_retained_generations(
    tmp_path: Path, counting: CountingEmbedder
) -> None:
    embedder = counting.inner
    root = IndexRoot(tmp_path / "index")
    old = [page(i) for i in range(12)]
    new = [page(i, edition=1 if i < 3 else 0) for i in range(12)]
    g1 = root.build(old)
    backfill_index(generation_dir(root.root, g1), embedder, EmbedSettings())
    g2 = root.build(new)
    backfill_index(generation_dir(root.root, g2), embedder, EmbedSettings())
    root.publish(g2)
    both = hashes_of(old, embedder) | hashes_of(new, embedder)
    assert set(store_of(root.root, embedder).hashes().tolist()) == both

    assert collect_garbage(root.root)[0].dropped == 0  # both generations retained
    assert set(store_of(root.root, embedder).hashes().tolist()) == both

    shutil.rmtree(generation_dir(root.root, g1))  # retention dropped the old generation
    report = collect_garbage(root.root)[0]
    store = store_of(root.root, embedder)
    kept = store.hashes().tolist()
    assert sorted(kept) == sorted(hashes_of(new, embedder))  # exactly, once each
    assert report.dropped == len(both) - len(kept) > 0
    assert len(list(store.path.glob("*.npy"))) == 2  # old segments rewritten into one
    # What is kept still reads back as the vectors the index was built from.
    used = np.load(passages_file(version_dir(generation_dir(root.root, g2), 0, embedder.model_id)))
    shard = open_vector_shard(generation_dir(root.root, g2), 0, model_id=embedder.model_id)
    first_doc = min(new, key=lambda d: d.doc_id)  # passages are listed in doc id order
    vector = store.vectors(used[:1])[0]
    assert shard.search(vector, 1)[0].doc_id == first_doc.doc_id


def test_a_new_generation_with_vectors_is_derived_and_published(
    tmp_path: Path, counting: CountingEmbedder
) -> None:
    embedder = counting.inner
    root = IndexRoot(tmp_path / "index")
    docs = [page(i) for i in range(8)]
    g1 = root.build(docs)
    root.publish(g1)
    g2, report = backfill_new_generation(root.root, embedder, EmbedSettings())
    assert root.current() == g2 != g1 and report.rows == 16
    assert Generation.open(generation_dir(root.root, g2), SearchSettings()).has_vectors
    assert not Generation.open(generation_dir(root.root, g1), SearchSettings()).has_vectors
    assert not any(p.name.startswith(".") for p in root.generations_dir.iterdir())
