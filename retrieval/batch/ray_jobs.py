"""The retrieval batch jobs on Ray: the embeddings backfill (Ray Data) and the index build.

Both run the same Trawl code as the local path, only elsewhere:

- **Backfill**: :func:`retrieval.vectors.backfill.backfill_index` plans here (which passages
  the store lacks), then :func:`ray_encoder` streams them as a Ray Dataset through an actor
  pool, each actor's encoder built by ``Embedder.from_settings`` from the same settings (same
  backend, same vectors). The driver is the store's only writer: each batch that comes back
  is one committed segment, so a killed worker costs at most its batch.
- **Index build**: one actor per shard reads the document source, keeps its partition
  (``shard_of``) and writes its Tantivy shard into the staged generation; the driver plans
  the ballast over every shard's statistics, the shards commit, and the generation is
  renamed into place only when all succeeded. Paths must be visible to every node.

``ray`` is imported only inside these functions (:func:`core.jobs.import_ray`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from core.atomic import staging_dir
from core.jobs import cluster_cpus, import_ray
from core.settings import EmbedSettings
from core.types import Document
from retrieval.index.build import shard_of
from retrieval.index.collection_stats import plan_ballast
from retrieval.index.layout import generation_dir, lexical_dir, vocabulary_file
from retrieval.index.lexical_writer import LexicalShardWriter
from retrieval.index.manifest import IndexManifest, new_generation_id
from retrieval.index.root import IndexRoot
from retrieval.index.vocabulary import VocabularyCounter
from retrieval.text.tokenizer import ANALYSIS_VERSION
from retrieval.vectors.backfill import EncodeFn, Pending, ProgressFn
from retrieval.vectors.embed import Embedder
from retrieval.vectors.store import VectorStore

DocSource = Callable[[], Iterable[Document]]
"""A picklable function that yields the collection's documents (each shard task calls it)."""

ENCODER_NAME = "PassageEncoder"
"""The encoder actor's class name (it names the worker processes: ``ray::…PassageEncoder…``)."""


class PassageEncoder:
    """A Ray Data actor: one encoder, loaded once, encoding batches of (hash, text)."""

    def __init__(self, settings_json: str, threads: int) -> None:
        settings = EmbedSettings.model_validate_json(settings_json).model_copy(
            update={"torch_threads": threads}
        )
        self.embedder = Embedder.from_settings(settings)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vectors = self.embedder.encode([str(t) for t in batch["text"]])
        return {"hash": batch["hash"].astype(np.uint64), "vector": np.asarray(vectors, dtype=np.float32)}


def _batches(pending: Pending, chunk_docs: int) -> list[tuple[list[str], np.ndarray]]:
    """Pending passages cut into batches of about ``chunk_docs`` documents' passages."""
    texts = [t for group, _ in pending.groups for t in group]
    hashes = np.concatenate([h for _, h in pending.groups]) if pending.groups else np.zeros(0, np.uint64)
    per_doc = len(texts) / max(1, len(pending.groups))
    size = max(1, math.ceil(per_doc * chunk_docs))
    return [(texts[i : i + size], hashes[i : i + size]) for i in range(0, len(texts), size)]


def ray_encoder(settings: EmbedSettings, *, actors: int | None = None, threads: int = 1) -> EncodeFn:
    """An ``encode`` for :func:`retrieval.vectors.backfill.backfill_index` that runs on the connected Ray.

    ``actors`` encoders (default: one per CPU of the cluster divided by ``threads``), each
    with ``threads`` intra-op threads. Vectors are appended by this process as batches
    return, one committed segment per batch, in whatever order they finish.
    """

    def encode(pending: Pending, store: VectorStore, chunk_docs: int, on_progress: ProgressFn | None) -> int:
        ray = import_ray()
        import pyarrow as pa
        from ray import data as ray_data

        total = pending.total
        if on_progress is not None:
            on_progress(0, total)
        batches = _batches(pending, chunk_docs)
        if not batches:
            return 0
        context = ray_data.DataContext.get_current()
        context.enable_progress_bars = False
        context.execution_options.preserve_order = False
        pool = actors or max(1, cluster_cpus(ray) // threads)
        tables = [pa.table({"hash": pa.array(h, pa.uint64()), "text": pa.array(t)}) for t, h in batches]
        dataset = ray_data.from_arrow(tables).map_batches(
            PassageEncoder,
            fn_constructor_kwargs={"settings_json": settings.model_dump_json(), "threads": threads},
            batch_size=None,
            batch_format="numpy",
            compute=ray_data.ActorPoolStrategy(size=min(pool, len(tables))),
            num_cpus=threads,
            zero_copy_batch=True,
        )
        done = 0
        for batch in dataset.iter_batches(batch_size=None, batch_format="numpy", prefetch_batches=1):
            fresh = ~store.contains(batch["hash"])
            if fresh.any():
                store.append(batch["hash"][fresh], batch["vector"][fresh])
            done += int(fresh.sum())
            if on_progress is not None:
                on_progress(done, total)
        return done

    return encode


# -- index build ---------------------------------------------------------------------------------


class ShardBuilder:
    """One shard of a build: reads the source, keeps its partition, writes its Tantivy shard."""

    def __init__(self, staging: str, shard: int, shards: int) -> None:
        self.shard, self.shards = shard, shards
        self.vocabulary = VocabularyCounter()
        self.writer = LexicalShardWriter(lexical_dir(Path(staging), shard), vocabulary=self.vocabulary)

    def fill(self, source: DocSource) -> tuple[int, dict[str, int], str]:
        """Add this shard's documents; returns (count, tokens per field, node id)."""
        import ray

        for doc in source():
            if shard_of(int(doc.doc_id), self.shards) == self.shard:
                self.writer.add(doc)
        return self.writer.count, dict(self.writer.field_tokens), ray.get_runtime_context().get_node_id()

    def finish(self, ballast_docs: int, ballast_tokens: dict[str, int]) -> VocabularyCounter:
        """Add the ballast the whole build planned, commit; returns the shard's vocabulary."""
        if ballast_docs:
            self.writer.add_ballast(ballast_docs, ballast_tokens)
        self.writer.commit()
        return self.vocabulary


def ray_build_index(
    source: DocSource,
    out: Path,
    *,
    shards: int = 1,
    source_name: str = "",
    extra: dict[str, Any] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> tuple[IndexManifest, list[str]]:
    """:func:`retrieval.index.build.build_index` with one Ray actor per shard; returns (manifest, node ids).

    ``out`` appears (renamed into place) only when every shard committed; any failed shard
    task raises here and the staged directory is removed.
    """
    ray = import_ray()
    # A CPU per shard while they fit (so shards spread over nodes), else none: never wait for CPUs.
    cpus = 1 if shards <= cluster_cpus(ray) else 0
    builder = ray.remote(num_cpus=cpus, max_restarts=0, scheduling_strategy="SPREAD")(ShardBuilder)
    with staging_dir(Path(out)) as tmp:
        actors = [builder.remote(str(tmp), i, shards) for i in range(shards)]
        try:
            pending = {actor.fill.remote(source): i for i, actor in enumerate(actors)}
            stats: dict[int, tuple[int, dict[str, int], str]] = {}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                stats[pending.pop(ready[0])] = ray.get(ready[0])
                if on_progress is not None:
                    on_progress(sum(s[0] for s in stats.values()))
            counts = [stats[i][0] for i in range(shards)]
            plan = plan_ballast(counts, [stats[i][1] for i in range(shards)])
            finished = [
                actor.finish.remote(n, tokens)
                for actor, n, tokens in zip(actors, plan.ballast_docs, plan.ballast_tokens, strict=True)
            ]
            vocabulary = VocabularyCounter()
            for part in ray.get(finished):
                vocabulary.update(part)
        finally:
            for actor in actors:
                ray.kill(actor)
        vocabulary.write(vocabulary_file(tmp))
        extra = {"analysis": ANALYSIS_VERSION, **(extra or {})}
        IndexManifest.write(tmp, shards=shards, docs=sum(counts), source=source_name, extra=extra)
    return IndexManifest.load(out), [stats[i][2] for i in range(shards)]


def ray_build_generation(
    root: IndexRoot,
    source: DocSource,
    *,
    shards: int = 1,
    source_name: str = "",
    on_progress: Callable[[int], None] | None = None,
) -> str:
    """:meth:`IndexRoot.build` on Ray: a new generation (not yet serving); returns its id."""
    root.sweep()
    generation = new_generation_id()
    ray_build_index(
        source,
        generation_dir(root.root, generation),
        shards=shards,
        source_name=source_name,
        extra={"generation": generation, "build_engine": "ray"},
        on_progress=on_progress,
    )
    return generation
