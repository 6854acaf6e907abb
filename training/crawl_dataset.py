"""Known-item judgments derived from a crawl: a BEIR-layout collection nobody had to judge.

Nobody hands us relevance judgments for the sites our users crawl, but a crawl judges
itself in three ways (the weak supervision web search has always used):

- **anchor** queries: the text of a link names the page it points to;
- **title** queries: a page's title without the site-name suffix every page repeats,
  detected as the separator-led suffix most titles share, never hard-coded;
- **heading** queries: a section heading names a section of its page.

Grades and the rules against triviality are on :func:`derive_queries`, folds (by target
page) on :func:`assign_folds`, the files and leakage guard on :func:`build_crawl_dataset`
(DECISIONS 11). The output is deterministic for a given crawl, ``max_per_page`` and ``seed``.

Example: ``build_crawl_dataset(Path("data/demo/crawl"), Path("data/eval-crawl/pydocs"))``
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import polars as pl

from core.atomic import staging_dir
from core.crawldir import CrawlDir
from core.docstore import DocStore
from core.errors import ConfigError
from core.linkgraph import LinkGraphStore, anchors_by_target
from core.types import Document

logger = logging.getLogger(__name__)

__all__ = [
    "CrawlDatasetReport",
    "KnownItemQuery",
    "assign_folds",
    "boilerplate_anchor_keys",
    "build_crawl_dataset",
    "derive_queries",
    "is_trivial",
    "normalize",
    "site_suffix",
    "strip_suffix",
]

Kind = Literal["title", "anchor", "heading"]
KINDS: tuple[Kind, ...] = ("title", "anchor", "heading")
"""Also the priority order: a text that is a page's title is a title query even when
links repeat it (Sphinx tables of contents link pages by their titles)."""

FOLDS = 5
MAX_TARGETS = 5
MAX_GROUP = 10
"""Most pages a chain of shared judgments may tie into one fold."""
MAX_QUERY_WORDS = 12
BOILERPLATE_SHARE = 0.3
"""On the Python docs, menu and breadcrumb anchors sit on 62–100% of the pages and the
most widely used content anchor on 13%."""
BOILERPLATE_MIN_SOURCES = 5
"""A text on fewer pages is never called boilerplate (small sites have few pages to share)."""
SUFFIX_SHARE = 0.3
STOP_TEXTS = frozenset(
    {
        "here", "click here", "this", "this page", "link", "more", "read more", "see more",
        "next", "previous", "prev", "next page", "previous page", "back", "top", "up", "home",
        "index", "modules", "contents", "table of contents", "source", "show source",
        "view source", "edit", "edit this page", "permalink", "continue", "go", "¶", "#",
    }
)  # fmt: skip
_EDGE_CHARS = " \t\n\r¶#»«›‹|·•"
_SEPARATOR = re.compile(r"\s+[—–\-|·:»]\s+")
_URLISH = re.compile(
    r"^(?:[a-z][a-z0-9+.-]*://|www\.)|^\S+\.(?:html?|php|aspx?|com|org|net|io)(?:[/?#]\S*)?$"
)


def clean(text: str) -> str:
    """Display form: whitespace collapsed, pilcrows and menu arrows trimmed from the ends."""
    return " ".join(text.split()).strip(_EDGE_CHARS)


def normalize(text: str) -> str:
    """The key two texts are the same query by."""
    return clean(unicodedata.normalize("NFKC", text)).casefold()


def is_trivial(text: str) -> bool:
    """True when a text cannot be a query for one page (the rules on :func:`derive_queries`)."""
    key = normalize(text)
    return (
        len(key) < 2
        or key in STOP_TEXTS
        or not any(ch.isalpha() for ch in key)
        or (key.startswith("(") and key.endswith(")"))
        or bool(_URLISH.search(key))
        or len(key.split()) > MAX_QUERY_WORDS
    )


def site_suffix(titles: Iterable[str], *, min_share: float = SUFFIX_SHARE) -> str:
    """The separator-led title suffix shared by the most titles ("" when none is common).

    A suffix counts once per distinct title; it must end at least ``min_share`` of the
    titles (and two). Among equally common suffixes the longest wins.
    """
    distinct = sorted({t.strip() for t in titles if t.strip()})
    counts: Counter[str] = Counter()
    for title in distinct:
        counts.update({title[m.start() :] for m in _SEPARATOR.finditer(title) if m.start() > 0})
    needed = max(2.0, min_share * len(distinct))
    common = [(n, len(s), s) for s, n in counts.items() if n >= needed]
    return max(common)[2] if common else ""


def strip_suffix(title: str, suffix: str) -> str:
    title = title.strip()
    if suffix and title.endswith(suffix):
        return title[: -len(suffix)].strip()
    return title


def boilerplate_anchor_keys(edges: pl.DataFrame, *, share: float = BOILERPLATE_SHARE) -> set[str]:
    """Normalised anchor texts found on at least ``share`` of the linking pages."""
    sources: dict[str, set[str]] = defaultdict(set)
    for src, text in zip(edges["src_url"].to_list(), edges["anchor_text"].to_list(), strict=True):
        sources[normalize(text or "")].add(src)
    linking = len(set(edges["src_url"].to_list()))
    needed = max(BOILERPLATE_MIN_SOURCES, share * linking)
    return {key for key, pages in sources.items() if len(pages) >= needed}


@dataclass(frozen=True, slots=True)
class KnownItemQuery:
    """One derived query: its text, why it exists, and the pages it judges."""

    query_id: str
    text: str
    kind: Kind
    kinds: tuple[Kind, ...]
    grades: Mapping[str, int]
    """URL → grade (1 or 2)."""
    target: str
    """The primary target: the grade-2 page with the most linking pages, then the smallest URL."""
    anchor_sources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """URL → source pages whose links with this text made the judgment (anchor evidence only)."""
    support: int = 0
    """Distinct pages linking with this text (0 for titles and headings alone)."""


@dataclass
class _Evidence:
    surface: Counter[str] = field(default_factory=Counter)
    titles: set[str] = field(default_factory=set)
    headings: set[str] = field(default_factory=set)
    anchors: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


def _seeded(seed: int, text: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{text}".encode(), digest_size=8).digest(), "big")


def _query_id(key: str) -> str:
    return "q" + hashlib.blake2b(key.encode("utf-8"), digest_size=6).hexdigest()


def _collect(docs: Sequence[Document], edges: pl.DataFrame, suffix: str) -> dict[str, _Evidence]:
    evidence: dict[str, _Evidence] = defaultdict(_Evidence)
    headings: dict[str, _Evidence] = defaultdict(_Evidence)
    for doc in docs:
        title = clean(strip_suffix(doc.title, suffix))
        if not is_trivial(title):
            evidence[normalize(title)].titles.add(doc.url)
            evidence[normalize(title)].surface[title] += 1
        for heading in doc.headings:
            key = normalize(heading)
            if not is_trivial(heading) and key != normalize(title):
                headings[key].headings.add(doc.url)
                headings[key].surface[clean(heading)] += 1
    for key, found in headings.items():
        if len(found.headings) <= MAX_TARGETS:
            evidence[key].headings |= found.headings
            evidence[key].surface.update(found.surface)
    boilerplate = boilerplate_anchor_keys(edges)
    for src, dst, text in edges.iter_rows():
        key = normalize(text)
        if key in boilerplate or is_trivial(text):
            continue
        evidence[key].anchors[dst].add(src)
        evidence[key].surface[clean(text)] += 1
    evidence.pop(normalize(_SEPARATOR.sub("", suffix, count=1)), None)  # the site's own name
    return evidence


def _judge(key: str, ev: _Evidence) -> KnownItemQuery | None:
    grades: dict[str, int] = {}
    links = {url: len(sources) for url, sources in ev.anchors.items()}
    top = max(links.values(), default=0)
    for url, n in links.items():
        grades[url] = 2 if n == top else 1
    for url in ev.titles:
        grades[url] = 2
    named_elsewhere = bool(ev.titles or ev.anchors)
    for url in ev.headings:
        grades[url] = max(grades.get(url, 0), 1 if named_elsewhere else 2)
    if not grades or len(grades) > MAX_TARGETS:
        return None
    kinds = tuple(
        k for k, present in zip(KINDS, (ev.titles, ev.anchors, ev.headings), strict=True) if present
    )
    target = min((url for url, g in grades.items() if g == 2), key=lambda u: (-links.get(u, 0), u))
    surface = min(ev.surface.items(), key=lambda item: (-item[1], item[0]))[0]
    return KnownItemQuery(
        query_id=_query_id(key),
        text=surface,
        kind=kinds[0],
        kinds=kinds,
        grades=dict(sorted(grades.items())),
        target=target,
        anchor_sources={url: tuple(sorted(s)) for url, s in sorted(ev.anchors.items())},
        support=len(set().union(*ev.anchors.values())) if ev.anchors else 0,
    )


def derive_queries(
    docs: Sequence[Document], edges: pl.DataFrame, *, max_per_page: int = 10, seed: int = 0
) -> list[KnownItemQuery]:
    """Known-item queries of a crawl, ordered by target then id.

    ``edges`` are the link graph's (src_url, dst_url, anchor_text) rows; only links
    between two different pages of ``docs`` count (self-links are ignored).

    Labels. Every text becomes one query (texts are compared after NFKC, whitespace
    collapsing and casefolding; the query keeps the most frequent surface form). The page
    a title names gets grade 2; among the pages an anchor text links to, the page linked
    from the most source pages gets 2 (ties all get 2) and the others 1; a heading gets
    its page(s) 2, or 1 where a title or an anchor already names another page for the same
    text. A text that fits more than ``MAX_TARGETS`` pages is not a known item and is
    dropped.

    Rules against triviality:

    - dropped as queries: anchor words that name no page (``STOP_TEXTS``: "here", "next",
      "previous", "¶", "index", "modules", …), URLs and file names, text without a letter
      (footnote marks "[1]", numbers, punctuation), one character, more than
      ``MAX_QUERY_WORDS`` words, fully parenthesised index fragments ("(in module os)"),
      and the site's own name (the detected suffix without its separator);
    - navigation boilerplate: an anchor text found on at least ``BOILERPLATE_SHARE`` of
      the linking pages and on ``BOILERPLATE_MIN_SOURCES`` at least (menus, breadcrumbs,
      footers) is no evidence for its target; a heading on more than ``MAX_TARGETS``
      pages ("Examples") is no evidence either;
    - a page's first heading that repeats its title is its title, not a section;
    - at most ``max_per_page`` queries per primary target page (titles first, then anchors
      by the number of pages using them, then headings; ties broken by a seeded hash), so
      a page linked from everywhere does not dominate the set.
    """
    if max_per_page < 1:
        raise ConfigError(f"max_per_page={max_per_page}: need at least 1 query per page.")
    urls = {doc.url for doc in docs}
    edges = (
        edges.select("src_url", "dst_url", "anchor_text")
        .filter(
            pl.col("src_url").is_in(list(urls))
            & pl.col("dst_url").is_in(list(urls))
            & (pl.col("src_url") != pl.col("dst_url"))
        )
        .with_columns(pl.col("anchor_text").fill_null(""))
    )
    suffix = site_suffix(doc.title for doc in docs)
    judged = [q for key, ev in sorted(_collect(docs, edges, suffix).items()) if (q := _judge(key, ev))]
    if len({q.query_id for q in judged}) != len(judged):
        raise ConfigError("Two derived queries hash to the same id; report this crawl.")
    by_target: dict[str, list[KnownItemQuery]] = defaultdict(list)
    for query in judged:
        by_target[query.target].append(query)
    kept: list[KnownItemQuery] = []
    for target in sorted(by_target):
        ranked = sorted(
            by_target[target],
            key=lambda q: (KINDS.index(q.kind), -q.support, _seeded(seed, q.query_id)),
        )
        kept.extend(sorted(ranked[:max_per_page], key=lambda q: q.query_id))
    return kept


class _PageGroups:
    """Union-find over pages: pages judged by one query must share a fold."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}
        self.size: dict[str, int] = {}

    def root(self, url: str) -> str:
        if url not in self.parent:
            self.parent[url], self.size[url] = url, 1
        while self.parent[url] != url:
            self.parent[url] = self.parent[self.parent[url]]
            url = self.parent[url]
        return url

    def join_size(self, urls: Iterable[str]) -> int:
        return sum(self.size[r] for r in {self.root(u) for u in urls})

    def join(self, urls: Iterable[str]) -> None:
        roots = sorted({self.root(u) for u in urls})
        for other in roots[1:]:
            self.parent[other] = roots[0]
            self.size[roots[0]] += self.size.pop(other)


def assign_folds(
    queries: Sequence[KnownItemQuery], *, k: int = FOLDS, seed: int = 0, max_group: int = MAX_GROUP
) -> tuple[list[KnownItemQuery], dict[str, int]]:
    """The queries kept and their folds: every page a query judges is in that query's fold only.

    Pages judged by one query form a group, and a group's fold is a seeded hash of its
    smallest URL. Queries are joined fewest targets first; a query that would make a
    group of more than ``max_group`` pages is dropped (multi-target queries chain most
    of a site into one group otherwise, and one fold would hold half the queries).
    """
    groups = _PageGroups()
    kept: list[KnownItemQuery] = []
    for query in sorted(queries, key=lambda q: (len(q.grades), -q.support, q.query_id)):
        if groups.join_size(query.grades) <= max_group:
            groups.join(query.grades)
            kept.append(query)
    kept.sort(key=lambda q: (q.target, q.query_id))
    return kept, {q.query_id: _seeded(seed, groups.root(q.target)) % k for q in kept}


@dataclass(frozen=True, slots=True)
class CrawlDatasetReport:
    """What was written, for the command's summary."""

    out: Path
    pages: int
    judged_pages: int
    queries_by_kind: dict[str, int]
    grades: dict[int, int]
    queries_by_fold: dict[int, int]
    site_suffix: str
    dropped_for_folds: int
    """Multi-target queries dropped because they would chain too many pages into one fold."""

    @property
    def queries(self) -> int:
        return sum(self.queries_by_kind.values())


def _jsonl(path: Path, records: Iterable[object]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def _corpus_records(docs: Sequence[Document], edges: pl.DataFrame) -> Iterable[dict[str, object]]:
    """BEIR records keyed by canonical URL; headings, inbound anchors (as the crawl index
    gets them), in-corpus outlinks (``metadata.links``, which BEIR PageRank reads) and the
    words inside links (``metadata.link_words``, the page's quality) kept."""
    urls = {doc.url for doc in docs}
    inbound = anchors_by_target(edges)
    outlinks: dict[str, set[str]] = defaultdict(set)
    for src, dst in zip(edges["src_url"].to_list(), edges["dst_url"].to_list(), strict=True):
        if src != dst and dst in urls:
            outlinks[src].add(dst)
    for doc in docs:
        yield {
            "_id": doc.url,
            "title": doc.title,
            "text": doc.body,
            "metadata": {
                "url": doc.url,
                "headings": list(doc.headings),
                "anchors": inbound.get(doc.url, []),
                "links": sorted(outlinks.get(doc.url, ())),
                "link_words": doc.link_words,
            },
        }


def _leakage_records(queries: Sequence[KnownItemQuery]) -> Iterable[dict[str, object]]:
    for query in queries:
        for target, sources in query.anchor_sources.items():
            yield {
                "query_id": query.query_id,
                "target": target,
                "anchor_key": normalize(query.text),
                "source_urls": list(sources),
            }


def build_crawl_dataset(
    data: Path, out: Path, *, max_per_page: int = 10, seed: int = 0
) -> CrawlDatasetReport:
    """Write the known-item collection of the crawl in ``data`` to ``out`` (replaced whole).

    Files: ``corpus.jsonl``, ``queries.jsonl`` (with kind, fold and target in
    ``metadata``), ``qrels/test.tsv``, ``folds.tsv``, ``leakage.jsonl`` and
    ``dataset.json`` (parameters and counts).

    Everything is judged in ``qrels/test.tsv``: Trawl's cross-validation
    (``training.train_ltr``) partitions one judged set into folds instead of reading fixed
    train/dev files; ``folds.tsv`` is the partition to use here, because a per-query random
    split would put the pages of one anchor text in two folds.

    ``leakage.jsonl``: for every (query, judged page) whose judgment came from anchors, the
    source pages of those links. Anchor features of that pair must be computed without the
    anchors whose normalised text equals the query's ``anchor_key`` coming from those
    sources; otherwise the query is found by its own anchor.
    """
    crawl = CrawlDir(data)
    if not crawl.docs.exists():
        raise ConfigError(f"{data} has no docstore (docs/); run `trawl crawl … --data {data}` first.")
    docs = sorted(DocStore(crawl.docs).iter_documents(), key=lambda d: d.url)
    if not docs:
        raise ConfigError(f"{data}: the docstore holds no documents; nothing to derive queries from.")
    edges = LinkGraphStore(crawl.links).read_edges()
    candidates = derive_queries(docs, edges, max_per_page=max_per_page, seed=seed)
    queries, folds = assign_folds(candidates, seed=seed)
    suffix = site_suffix(d.title for d in docs)
    per_fold = Counter(folds.values())
    judged = {url for q in queries for url in q.grades}
    report = CrawlDatasetReport(
        out=Path(out),
        pages=len(docs),
        judged_pages=len(judged),
        queries_by_kind={k: sum(q.kind == k for q in queries) for k in KINDS},
        grades=dict(sorted(Counter(g for q in queries for g in q.grades.values()).items())),
        queries_by_fold={f: per_fold.get(f, 0) for f in range(FOLDS)},
        site_suffix=suffix,
        dropped_for_folds=len(candidates) - len(queries),
    )
    with staging_dir(Path(out)) as tmp:
        _jsonl(tmp / "corpus.jsonl", _corpus_records(docs, edges))
        _jsonl(
            tmp / "queries.jsonl",
            (
                {
                    "_id": q.query_id,
                    "text": q.text,
                    "metadata": {
                        "kind": q.kind,
                        "kinds": list(q.kinds),
                        "target": q.target,
                        "fold": folds[q.query_id],
                    },
                }  # fmt: skip
                for q in queries
            ),
        )
        (tmp / "qrels").mkdir()
        rows = [f"{q.query_id}\t{url}\t{grade}\n" for q in queries for url, grade in q.grades.items()]
        (tmp / "qrels" / "test.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(rows), encoding="utf-8"
        )
        folds_text = "".join(f"{q.query_id}\t{folds[q.query_id]}\n" for q in queries)
        (tmp / "folds.tsv").write_text("query-id\tfold\n" + folds_text, encoding="utf-8")
        _jsonl(tmp / "leakage.jsonl", _leakage_records(queries))
        manifest = {
            "source": str(Path(data).resolve()),
            "seed": seed,
            "max_per_page": max_per_page,
            "folds": FOLDS,
            "site_suffix": suffix,
            "rules": {"max_targets": MAX_TARGETS, "max_query_words": MAX_QUERY_WORDS,
                      "boilerplate_share": BOILERPLATE_SHARE, "suffix_share": SUFFIX_SHARE},
            "pages": report.pages,
            "judged_pages": report.judged_pages,
            "queries_by_kind": report.queries_by_kind,
            "grades": {str(g): n for g, n in report.grades.items()},
            "queries_by_fold": {str(f): n for f, n in report.queries_by_fold.items()},
        }  # fmt: skip
        (tmp / "dataset.json").write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    logger.info("crawl dataset %s: %d queries over %d pages", out, report.queries, report.judged_pages)
    return report
