"""Known-item queries from a crawl: filters, site suffix, graded labels, per-page cap, folds."""

from __future__ import annotations

from collections import defaultdict

import networkx as nx
import polars as pl
import pytest

from core.linkgraph import edge_schema
from core.types import Document, doc_id_for
from training.crawl_dataset import (
    MAX_TARGETS,
    KnownItemQuery,
    assign_folds,
    derive_queries,
    is_trivial,
    site_suffix,
    strip_suffix,
)

SITE = "http://docs.test/"
SUFFIX = " — Tiny Docs 1.0"
PAGES = ["asyncio", "pathlib", "json", "re", "os", "sys", "math", "time", "csv", "zlib", "index", "genindex"]


def url(name: str) -> str:
    return f"{SITE}{name}.html"


def page(name: str, title: str, headings: tuple[str, ...] = ()) -> Document:
    return Document(doc_id_for(url(name)), url(name), title, f"{title} body", headings=headings)


def site() -> tuple[list[Document], pl.DataFrame]:
    """Twelve pages; every page carries a menu ("Site Overview", "next", "index") and a few
    pages link to asyncio/pathlib by content anchors."""
    docs = [page(n, f"{n} — module {n}{SUFFIX}", (f"{n} — module {n}¶", "Examples¶")) for n in PAGES]
    docs[0] = page(
        "asyncio", f"asyncio — Asynchronous I/O{SUFFIX}", ("asyncio — Asynchronous I/O¶", "Event Loop¶")
    )
    edges: list[tuple[str, str, str]] = []
    for i, name in enumerate(PAGES):
        edges.append((url(name), url("index"), "Site Overview"))
        edges.append((url(name), url(PAGES[(i + 1) % len(PAGES)]), "next"))
        edges.append((url(name), url("genindex"), "index"))
        edges.append((url(name), url(name), "¶"))
    edges += [
        (url("os"), url("asyncio"), "event loop"),
        (url("sys"), url("asyncio"), "event loop"),
        (url("time"), url("pathlib"), "event loop"),
        (url("os"), url("pathlib"), "Path.glob()"),
        (url("os"), url("pathlib"), "https://docs.test/pathlib.html"),
        (url("os"), url("json"), "[1]"),
        (url("os"), "https://elsewhere.test/", "elsewhere"),
    ]
    frame = pl.DataFrame(
        dict(zip(edge_schema(), zip(*edges, strict=True), strict=True)), schema=edge_schema()
    )
    return docs, frame


def by_text(queries: list[KnownItemQuery]) -> dict[str, KnownItemQuery]:
    return {q.text: q for q in queries}


@pytest.mark.parametrize(
    "text",
    ["here", "Next »", "¶", "[1]", "42", "https://x.org/a", "www.python.org", "index.html", "x",
     "(in module os)", " ".join(["word"] * 13)],
)  # fmt: skip
def test_trivial_texts_are_not_queries(text: str) -> None:
    assert is_trivial(text)


@pytest.mark.parametrize("text", ["pathlib", "json.dumps()", "Event Loop¶", "os.path"])
def test_names_of_things_are_queries(text: str) -> None:
    assert not is_trivial(text)


def test_site_suffix_is_detected_from_titles_and_stripped() -> None:
    titles = [f"{n} — module {n}{SUFFIX}" for n in PAGES] + ["Tiny Docs 1.0", "Odd page"]
    assert site_suffix(titles) == SUFFIX
    assert strip_suffix(f"pathlib — Object paths{SUFFIX}", SUFFIX) == "pathlib — Object paths"
    assert site_suffix(["alpha — one", "beta — two", "gamma"]) == ""


def test_boilerplate_stop_words_urls_and_foreign_links_give_no_queries() -> None:
    texts = {q.text.casefold() for q in derive_queries(*site())}
    for dropped in (
        "site overview",
        "next",
        "index",
        "¶",
        "[1]",
        "https://docs.test/pathlib.html",
        "elsewhere",
    ):
        assert dropped not in texts
    assert {"path.glob()", "event loop"} <= texts


def test_titles_are_queries_without_the_site_suffix() -> None:
    query = by_text(derive_queries(*site()))["asyncio — Asynchronous I/O"]
    assert (query.kind, dict(query.grades)) == ("title", {url("asyncio"): 2})
    assert query.kinds == ("title",)  # the first heading repeats the title: not a section query


def test_most_linked_target_grade_2_others_grade_1() -> None:
    query = by_text(derive_queries(*site()))["event loop"]
    assert dict(query.grades) == {url("asyncio"): 2, url("pathlib"): 1}
    assert query.target == url("asyncio")
    assert dict(query.anchor_sources) == {
        url("asyncio"): (url("os"), url("sys")),
        url("pathlib"): (url("time"),),
    }
    assert query.kinds == ("anchor", "heading")


def test_section_heading_judges_its_page_and_common_headings_are_dropped() -> None:
    docs, edges = site()
    docs[1] = page("pathlib", f"pathlib{SUFFIX}", ("Globbing¶",))
    queries = by_text(derive_queries(docs, edges))
    assert (queries["Globbing"].kind, dict(queries["Globbing"].grades)) == ("heading", {url("pathlib"): 2})
    assert sum(h == "Examples¶" for d in docs for h in d.headings) > MAX_TARGETS
    assert "Examples" not in queries


def test_queries_per_target_page_are_capped_titles_first() -> None:
    docs, edges = site()
    extra = [(url(src), url("pathlib"), f"pathlib feature {i}") for i, src in enumerate(PAGES[2:8])]
    edges = pl.concat([edges, pl.DataFrame(dict(zip(edge_schema(), zip(*extra, strict=True), strict=True)))])
    per_page = defaultdict(list)
    for query in derive_queries(docs, edges, max_per_page=3):
        per_page[query.target].append(query.kind)
    assert len(per_page[url("pathlib")]) == 3
    assert per_page[url("pathlib")].count("title") == 1


def test_derivation_is_deterministic() -> None:
    assert derive_queries(*site(), seed=3) == derive_queries(*site(), seed=3)


def known(qid: str, *urls: str) -> KnownItemQuery:
    return KnownItemQuery(qid, qid, "anchor", ("anchor",), {u: 2 for u in urls}, urls[0])


def test_folds_never_split_the_pages_a_query_judges() -> None:
    chain = [known(f"q{i}", url(f"p{i}"), url(f"p{i + 1}")) for i in range(30)]
    singles = [known(f"s{i}", url(f"p{i}")) for i in range(40)]
    kept, folds = assign_folds(chain + singles, k=5, seed=1, max_group=4)
    assert set(folds) == {q.query_id for q in kept} and set(folds.values()) <= set(range(5))
    fold_of_page: dict[str, set[int]] = defaultdict(set)
    for query in kept:
        for page_url in query.grades:
            fold_of_page[page_url].add(folds[query.query_id])
    assert all(len(f) == 1 for f in fold_of_page.values())
    assert {q.query_id for q in singles} <= set(folds)  # single-page queries are never dropped
    graph = nx.Graph()
    for query in kept:
        nx.add_path(graph, sorted(query.grades))
    assert max(len(c) for c in nx.connected_components(graph)) <= 4
    assert 10 <= sum(q.query_id.startswith("q") for q in kept) < 30  # the chain is cut
    assert len(set(folds.values())) > 1
