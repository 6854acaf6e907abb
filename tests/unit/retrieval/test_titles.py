"""Site-name title suffixes: detected per host from the titles, removed for index and display."""

from __future__ import annotations

from pathlib import Path

from core.docstore import DocStore
from core.types import Document, doc_id_for
from retrieval.index.docs_source import crawled_documents
from retrieval.text.titles import site_suffix, without_suffix


def test_the_suffix_most_titles_share_is_found() -> None:
    titles = ["Event Loop — Python 3.11.2 documentation", "pathlib — Python 3.11.2 documentation",
              "json — JSON encoder — Python 3.11.2 documentation", "Index"]  # fmt: skip
    assert site_suffix(titles) == " — Python 3.11.2 documentation"


def test_no_suffix_when_titles_share_none() -> None:
    assert site_suffix(["Apples - red", "Pears - green", "Plums"]) == ""
    assert site_suffix(["Only one — Site"]) == ""
    assert site_suffix([]) == ""


def test_removal_keeps_a_title_that_is_only_the_site_name() -> None:
    assert without_suffix("Event Loop — Docs", " — Docs") == "Event Loop"
    assert without_suffix(" — Docs", " — Docs") == "— Docs"
    assert without_suffix("Other title", " — Docs") == "Other title"


def test_crawled_documents_lose_their_hosts_suffix(tmp_path: Path) -> None:
    def doc(url: str, title: str, host: str) -> Document:
        return Document(doc_id=doc_id_for(url), url=url, title=title, body="text", host=host)

    DocStore(tmp_path / "docs").append(
        [
            doc("http://a.org/1", "One | A Site", "a.org"),
            doc("http://a.org/2", "Two | A Site", "a.org"),
            doc("http://a.org/3", "Three [x] | A Site", "a.org"),
            doc("http://b.org/1", "Uno | Bee", "b.org"),
            doc("http://b.org/2", "Dos - other", "b.org"),
            doc("http://b.org/3", "Tres", "b.org"),
        ]
    )
    titles = {d.url: d.title for d in crawled_documents(tmp_path)}
    assert titles == {
        "http://a.org/1": "One", "http://a.org/2": "Two", "http://a.org/3": "Three [x]",
        "http://b.org/1": "Uno | Bee", "http://b.org/2": "Dos - other", "http://b.org/3": "Tres",
    }  # fmt: skip
