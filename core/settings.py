"""Settings from the environment (``TRAWL_*``, nested with ``__``) and an optional TOML file.

Built once at an entry point (a ``trawl`` command or ``api.app.create_app``) and passed
down; components take plain values in ``__init__`` and offer ``from_settings``.

Example: ``TRAWL_SEARCH__MAX_PAGE_SIZE=50 trawl serve --index data/index``, or a
``trawl.toml`` with a ``[search]`` table, named by ``TRAWL_CONFIG`` or passed to
:func:`load_settings`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)


class SearchSettings(BaseModel):
    """Query-time knobs of the lexical path."""

    default_page_size: int = Field(10, ge=1, le=100)
    max_page_size: int = Field(50, ge=1, le=1000)
    max_page: int = Field(100, ge=1)
    max_cursor_depth: int = Field(10_000, ge=1)
    """Deepest result a cursor reaches (each page ranks this deep on every shard)."""
    cursor_key: SecretStr | None = None
    """Secret that signs cursors (shared by every process of a deployment); None: a random key
    created under the index root on first start."""
    max_query_chars: int = Field(2048, ge=16)
    """Longer queries are cut to this many characters (a parse, not an error)."""
    max_query_terms: int = Field(64, ge=1)
    title_boost: float = Field(0.5, gt=0)
    """Added on top of the body (the title is indexed in the body too); see FieldBoosts."""
    headings_boost: float = Field(0.4, gt=0)
    anchors_boost: float = Field(1.2, gt=0)
    body_boost: float = Field(1.0, gt=0)
    snippet_chars: int = Field(220, ge=40, le=2000)
    candidate_k: int = Field(100, ge=10, le=5000)
    """Lexical and vector candidates per shard for fused rankers (the first window)."""
    default_ranker: str = "auto"
    """``auto``: ltr when a model is loaded and the generation has vectors, else hybrid, else bm25."""
    hybrid_weight: float = Field(0.5, ge=0, le=1)
    """Weight of the cosine in the convex hybrid: the median of the cross-validated fold weights."""
    rrf_k: int = Field(60, ge=1)
    """k of reciprocal rank fusion (``hybrid-rrf``), read by serving and by the evaluation harness."""
    use_vectors: bool = True
    deadline_s: float = Field(1.0, gt=0)
    hedge: bool = True
    circuit_trip_after: int = Field(3, ge=1)
    """Misses in a row (a remote shard failing, or late by a deadline) that open its circuit: the
    broker then skips it at once, answering partially, until a background probe answers."""
    circuit_probe_every_s: float = Field(1.0, gt=0)
    cache_entries: int = Field(4096, ge=0)
    cache_ttl_s: float = Field(60.0, ge=0)
    shared_cache_path: Path | None = None
    """A SQLite file of responses the workers of one ``trawl serve`` share (it sets this)."""
    open_generations: int = Field(
        3, ge=1, validation_alias=AliasChoices("open_generations", "keep_generations")
    )
    """Generations a serving process keeps open (the serving one and those live cursors name;
    ``keep_generations``, this setting's name before ``index.keep_generations`` existed, still
    works for one release)."""
    verify_interval_s: float = Field(10.0, ge=0)
    """How often a serving process checks its generation's files in the background: a
    ``stat`` each, content read again only where size or time changed (and once a day);
    0: once, after a generation opens."""
    spelling: bool = True
    """Spelling suggestions from the generation's vocabulary (retrieval.query.spelling)."""
    compounds: bool = True
    """Also search the other spelling of compound words the vocabulary holds ("default dict" finds
    ``defaultdict``, "f-string" finds "fstring"): :mod:`retrieval.text.compounds`."""
    spell_known_df: int = Field(2, ge=1)
    """A word in at least this many documents is never corrected."""
    spell_max_distance: int = Field(2, ge=1, le=3)
    spell_rewrite_below: int = Field(3, ge=0)
    """Serve the corrected query instead when the original finds fewer results (0: never)."""
    synonyms_file: Path | None = None
    """TOML synonyms applied at query time (retrieval.text.synonyms); None: no synonyms."""


class IndexSettings(BaseModel):
    """Index roots on disk: how many generations stay, how long a writer waits for another."""

    keep_generations: int = Field(3, ge=0)
    """Generations kept for rollback besides the serving one when ``trawl index gc`` (and
    ``trawl run`` after each compaction) removes old ones; any a serving process has open
    stays too. 0: only the serving one (no rollback after a gc)."""
    lock_wait_s: float = Field(10.0, ge=0)
    """How long publish, rollback and gc wait for another writer of the index root (a
    ``trawl run`` step) before refusing with its name; a build never waits."""


class EmbedSettings(BaseModel):
    """Embedding model and vector index parameters."""

    batch_size: int = Field(32, ge=1)
    gpu_batch_size: int = Field(1024, ge=1)
    """Texts per torch batch when the model runs on a GPU: MiniLM is too small to keep one
    busy at 32; on an H200, 1,024 encoded 4,341 passages/s against 3,701 at 256 and 2,186 at
    32 (bench/results/embed-gpu.md). Lower it for a GPU with little memory."""
    max_seq_length: int = Field(256, ge=16, le=512)
    passage_words: int = Field(160, ge=16)
    passage_stride: int = Field(120, ge=8)
    hnsw_m: int = Field(16, ge=2)
    hnsw_ef_construction: int = Field(200, ge=8)
    hnsw_ef: int = Field(100, ge=8)
    query_cache_size: int = Field(1024, ge=0)
    backend: Literal["auto", "onnx-int8", "torch"] = "auto"
    """auto: ONNX Runtime int8 (per-channel weights, 3.5x torch fp32) when it passes its
    self-check against fp32, else torch. onnx-int8: that or an error. torch: never ONNX."""
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    """Torch backend only. auto: bf16 autocast when the CPU has AVX-512 BF16/AMX (or the
    model runs on a GPU) and agrees with fp32, else fp32."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the torch backend runs. auto: a CUDA GPU when torch sees one (and then
    backend auto means torch there, not ONNX int8 on the CPU), else the CPU. cuda: the GPU
    or a load error. ONNX int8 always runs on the CPU."""
    onnx_cache_dir: Path | None = None
    """Where the exported int8 models live, one folder per weights hash; None:
    ``$XDG_CACHE_HOME/trawl/onnx``."""
    onnx_batch_size: int = Field(1, ge=1)
    """Texts per ONNX Runtime call. One: as fast as 2, 4 or 8 on this machine and 1.6x
    faster than 32 (int8 activation scales and padding are per call), and a text's vector
    never depends on its batch company (at 32: cosine .992 between the two)."""
    onnx_min_mean_cosine: float = Field(0.99, ge=-1, le=1)
    """Self-check: the int8 vectors' mean cosine to torch fp32 on the fixed sample must reach this."""
    onnx_min_cosine: float = Field(0.95, ge=-1, le=1)
    """Self-check: and every text of the sample must reach this."""
    torch_threads: int | None = Field(None, ge=1)
    """CPUs a batch job's encoder uses (torch: intra-op threads; ONNX Runtime: texts encoded
    side by side, one single-threaded run each); None: one per CPU this process may use."""
    serve_torch_threads: int = Field(1, ge=1)
    """Intra-op threads of a serving process's encoder (torch or ONNX Runtime): on a loaded
    2-core machine one torch thread encoded a query in 41 ms mean against 457 ms for two
    (idle: ~8 ms either way)."""
    vector_k: int = Field(100, ge=1)
    """Vector candidates per shard for hybrid recall (lexical gets the same depth)."""
    backfill_chunk_docs: int = Field(256, ge=1)
    """Documents per backfill chunk: the unit of work lost when a job is killed."""


class CrawlSettings(BaseModel):
    """Politeness, budgets and fetch limits of the crawler."""

    user_agent: str = "TrawlBot/0.1 (+https://github.com/trawl-search/trawl; crawler@trawl.invalid)"
    min_delay_s: float = Field(1.0, ge=0)
    response_time_factor: float = Field(2.0, ge=0)
    max_page_bytes: int = Field(5 * 1024 * 1024, ge=1024)
    fetch_timeout_s: float = Field(15.0, gt=0)
    max_redirects: int = Field(5, ge=0)
    max_depth: int = Field(10, ge=0)
    max_pages: int = Field(10_000, ge=1)
    max_pages_per_host: int = Field(5_000, ge=1)
    max_links_per_page: int = Field(500, ge=1)
    robots_ttl_s: float = Field(86_400, gt=0)
    allow_loopback: bool = False
    """Crawl loopback addresses (127/8, ::1): local sites, tests and the demo."""
    allow_private: bool = False
    """Crawl private networks (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7). Never
    loopback (``allow_loopback``) and never link-local (169.254/16, fe80::/10, the cloud
    metadata address): those need ``allowed_networks``."""
    concurrency: int = Field(16, ge=1)
    scope: Literal["host", "domain", "any"] = "host"
    allowed_networks: list[str] = []
    """CIDR blocks crawled whatever the switches say (tests, an intranet, a link-local service)."""
    parse_workers: int = Field(0, ge=0)
    """Processes that parse HTML off the event loop; 0: one per core."""
    parse_timeout_s: float = Field(10.0, gt=0)
    """Most seconds one page may take to parse; a slower page is recorded ``parse timeout``."""
    max_html_depth: int = Field(512, ge=16)
    """Element nesting past this depth is cut off before parsing (lexbor is quadratic in depth)."""
    robots_error_ttl_s: float = Field(600, gt=0)
    """How long a robots.txt answering 5xx (or unreachable) blocks its host before a retry."""
    max_retries: int = Field(3, ge=0)
    backoff_base_s: float = Field(2.0, ge=0)
    max_backoff_s: float = Field(600, ge=0)
    lease_s: float = Field(300, gt=0)
    recrawl_initial_s: float = Field(86_400, ge=0)
    recrawl_min_s: float = Field(3_600, ge=0)
    recrawl_max_s: float = Field(30 * 86_400, ge=0)
    failed_retry_s: float = Field(86_400, ge=0)
    """In a recrawl (``trawl run``, ``trawl crawl --recrawl``), a page that ended ``failed`` (its
    retries used up by errors, or by crawl processes that died holding it) is tried again
    this long after its last attempt, with fresh retries: a site's outage, or a crawler
    killed a few times in a row, must not drop a page for good. 0: failed stays failed."""
    recrawl_budget: int = Field(1_000, ge=0)
    """Due pages made pending per crawl round (each ``trawl crawl --recrawl``, each ``trawl
    run`` round): the ones with the highest P(changed) x importance (``crawl.frontier.tiers``); the
    rest stay due for the next round, so a large backlog cannot starve new URLs. A round
    at the default concurrency fetches about this many in a minute. 0: every due page."""
    sitemap_refetch_s: float = Field(3_600, gt=0)
    """Seconds between fetches of a known sitemap (conditional GET; robots and politeness as
    for pages): how soon its new ``<lastmod>`` dates make the pages they name due."""
    near_dup_max_distance: int = Field(3, ge=0, le=3)
    flush_every: int = Field(200, ge=1)
    """Results per commit: documents, edges and crawl state are written together."""
    flush_interval_s: float = Field(2.0, gt=0)
    warc_max_file_bytes: int = Field(1 << 30, ge=1 << 20)
    warc_gzip_level: int = Field(1, ge=0, le=9)
    """zlib level of each WARC record's gzip member: 1 spends less than half the CPU of 6 for
    archives ~26% bigger (``crawl.run.warc.GZIP_LEVEL``); 6 or 9 for archives kept for years."""
    frontier_url: str | None = None
    """A ``postgresql://`` frontier shared by many crawl workers (unset: the crawl directory's SQLite)."""
    worker_id: str | None = None
    """This worker's name on a shared frontier (unset: ``host-pid``); names its segment folders."""
    db_outage_s: float = Field(180.0, ge=0)
    """How long a fleet worker rides out a lost PostgreSQL connection (a restart, a failover),
    retrying with backoff and resuming its leases, before it stops with one line. Keep it
    under ``lease_s``, so that no lease runs out while the fleet waits."""


class ApiSettings(BaseModel):
    """The HTTP service. Where it listens is a ``trawl serve --host/--port`` argument, not a setting."""

    admin_api_key: SecretStr | None = None
    """Admin endpoints (crawl seeds, publish, rollback) need ``X-API-Key``; unset = admin off."""
    crawl_data: Path | None = None
    """A crawl data directory for /v1/hosts, /v1/inspect and the crawl admin endpoints."""
    push_data: Path | None = None
    """The data directory ``PUT /v1/documents/{id}`` writes to, which the served index then
    follows in place (it must be the directory the index is built from); unset = push off."""
    push_poll_s: float = Field(0.25, gt=0)
    """How often the served index looks for pushed segments: the push-to-searchable lag."""
    push_compact_every_s: float = Field(3600.0, ge=0)
    """A new generation from the whole push directory this often (0: never)."""
    suggest_at_start: bool = True
    """Build the serving generation's suggestions (``/v1/suggest``) in the background as the
    service starts, so the first keystroke does not wait for it (seconds at 100K pages)."""
    rate_limit_per_s: float = Field(50.0, ge=0)
    """Sustained requests per second per client address and worker process; 0 disables the limit."""
    rate_limit_burst: int = Field(100, ge=1)
    trusted_proxies: list[str] = []
    """CIDR blocks of reverse proxies whose ``X-Forwarded-For`` names the client (rate limit);
    from anyone else the header is ignored."""
    max_request_bytes: int = Field(64 * 1024, ge=1024)
    """Larger request bodies (and URLs) are refused with 413/414."""
    encode_queries: bool = True
    """Load the embedding model at start-up when the index has vectors."""
    search_threads: int | None = Field(None, ge=1)
    """Searches run side by side at most (the rest wait their turn); None: one in each worker of
    several with in-process shards, else twice the CPUs. More threads than cores only fight
    over the GIL: at 8 clients on 2 cores, 4 threads served 15-25% more LTR and ~8% more hybrid
    queries/s than one thread per client (one process), and with two workers one thread each
    served 17% more LTR queries/s than four (``api.deps.default_search_threads``)."""


class ExperimentSettings(BaseModel):
    """Where A/B experiments read their definitions and write their logs."""

    rankers_file: Path = Path("rankers.toml")
    """Named, versioned ranker configs (``[rankers.NAME]`` tables)."""
    experiments_file: Path = Path("experiments.toml")
    """Online experiment definitions; a missing file means no experiment runs."""
    log_dir: Path | None = None
    """Impression and click logs; None: ``<data_dir>/experiments/logs``."""
    buffer_rows: int = Field(512, ge=1, le=1_000_000)
    """Rows held in memory per log before a Parquet part is written."""
    flush_interval_s: float = Field(5.0, gt=0)
    user_header: str = "X-Trawl-User"
    user_cookie: str = "trawl_uid"
    impression_cache: int = Field(100_000, ge=0)
    click_dedup_s: float = Field(10.0, ge=0)
    """A second click on the same impression and position within this many seconds is the
    same click (a double click, a retry): answered, not logged again. 0: keep every click."""
    """Recent impressions kept in memory to validate clicks (warmed from the log at start)."""


class RankSettings(BaseModel):
    """The learned ranking stages: which model serves, and feature logging."""

    ltr_model: Path | None = None
    """A ``trawl train ltr`` output directory; None: ``models/ltr/default`` when it exists."""
    ltr_scorer: Literal["compiled", "lightgbm"] = "compiled"
    """compiled: the model's trees compiled by lleaves (checked against LightGBM at load;
    LightGBM, with one warning, when they cannot be built). lightgbm: LightGBM's predict."""
    compiled_trees_dir: Path | None = None
    """Where compiled trees are cached, one folder per model id and compiler; None:
    ``$XDG_CACHE_HOME/trawl/trees``. Unused for a model shipping its own (``trawl train ltr``)."""
    feature_log_dir: Path | None = None
    """Where the ``ltr`` stage logs sampled feature rows (Parquet); None: no logging."""
    feature_log_rate: float = Field(0.01, ge=0, le=1)
    """Fraction of queries whose scored feature rows are logged."""
    user_lang: str = "en"
    """Language assumed wanted by queries without ``lang:`` (the ``lang_match`` feature)."""
    reranker_model: Path | None = None
    """A ``trawl train reranker`` output directory: serves the ``ltr+ce`` stage; None: off."""
    reranker_device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the cross-encoder runs: as ``embed.device`` (auto: a CUDA GPU when torch sees one)."""
    reranker_top_n: int = Field(20, ge=2, le=200)
    """How many of the LTR stage's top documents the cross-encoder reorders."""
    reranker_weight: float = Field(0.2, ge=0, le=1)
    """Head order: weight · z(cross-encoder) + (1 − weight) · z(LTR); 1 is the cross-encoder alone.
    0.2: between the weights cross-validation chose (0.1 cranfield, 0.2–0.3 cisi); alone the
    fine-tuned MiniLM ranks far below LTR."""
    reranker_train_pairs: int = Field(1024, ge=8)
    """Most (query, document) pairs one fine-tuning run uses (sampled; keeps a fold to minutes)."""


class JobSettings(BaseModel):
    """Where the offline batch jobs (backfill, index build, PageRank, feature frames) run."""

    engine: Literal["local", "ray"] = "local"
    """local: in this process, needing nothing. ray: on a Ray cluster (the ``ray`` extra)."""
    ray_address: str | None = None
    """None: start a local Ray sized to this machine; ``auto`` or ``HOST:PORT``: join that cluster."""
    ray_num_cpus: int | None = Field(None, ge=1)
    """CPUs of a Ray started here; None: every CPU of the machine."""
    ray_object_store_mb: int | None = Field(None, ge=64)
    """Object store of a Ray started here; None: Ray's default (30% of memory)."""
    embed_actors: int | None = Field(None, ge=1)
    """Encoder actors of a Ray backfill; None: one per CPU of the cluster."""
    actor_threads: int = Field(1, ge=1)
    """Intra-op threads of each Ray encoder actor (one actor per CPU uses the cores best)."""
    pagerank_blocks: int | None = Field(None, ge=1)
    """Source blocks of a Ray PageRank (one actor each); None: one per CPU of the cluster."""


class Settings(BaseSettings):
    """All of Trawl's settings, one nested section per package."""

    model_config = SettingsConfigDict(
        env_prefix="TRAWL_", env_nested_delimiter="__", extra="forbid", toml_file=None
    )

    data_dir: Path = Path("data")
    search: SearchSettings = SearchSettings()
    index: IndexSettings = IndexSettings()
    embed: EmbedSettings = EmbedSettings()
    crawl: CrawlSettings = CrawlSettings()
    api: ApiSettings = ApiSettings()
    experiments: ExperimentSettings = ExperimentSettings()
    rank: RankSettings = RankSettings()
    jobs: JobSettings = JobSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Precedence: explicit arguments, then environment, then the TOML file.
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_path = os.environ.get("TRAWL_CONFIG")
        if toml_path:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(toml_path)))
        return tuple(sources)


def load_settings(toml_file: Path | None = None, **overrides: Any) -> Settings:
    """Build settings from overrides, ``TRAWL_*`` variables and an optional TOML file."""
    if toml_file is None:
        return Settings(**overrides)
    previous = os.environ.get("TRAWL_CONFIG")
    os.environ["TRAWL_CONFIG"] = str(toml_file)
    try:
        return Settings(**overrides)
    finally:
        if previous is None:
            del os.environ["TRAWL_CONFIG"]
        else:
            os.environ["TRAWL_CONFIG"] = previous
