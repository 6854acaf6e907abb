"""One person's way through the pages in a real browser, every surface of the search page in turn.

A query, page 3 by its number, a facet that narrows to one site, "why this result" whose parts
add up to the score it shows, a suggestion taken from the box's list, and the home page
while an embeddings backfill runs (it must say what ``/healthz`` says). A screenshot of each
step goes to ``$TRAWL_TEST_ARTEFACTS`` (or the test's temporary folder), for a person to look at
when the test fails. A ``<datalist>``'s popup is the browser's own UI, not the page's, so
"taking a suggestion" is putting an offered option's text in the box, which is what it does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from core.settings import Settings
from core.types import Document, doc_id_for
from retrieval.index.build import build_index
from retrieval.vectors.backfill_progress import BackfillProgress, write_progress
from tests.conftest import ServerThread

pytestmark = pytest.mark.e2e

HOSTS = ("docs.example", "blog.example", "wiki.example")


def _docs() -> list[Document]:
    docs = []
    for i in range(45):
        host = HOSTS[i % 3]
        url = f"https://{host}/guide/{i}"
        words = "ranking" if i % 2 else "ranking ranking crawler"
        docs.append(
            Document(
                doc_id=doc_id_for(url),
                url=url,
                title=f"Guide {i} to search {words}",
                body=f"Part {i} of the guide: how search engines do {words}. " + "more text " * (10 + i),
                host=host,
                lang="en",
            )
        )
    url = "https://docs.example/asyncio"
    docs.append(
        Document(
            doc_id=doc_id_for(url),
            url=url,
            title="Asynchronous I/O with asyncio",
            body="asyncio is a library to write concurrent code with async and await.",
            host="docs.example",
            lang="en",
        )
    )
    return docs


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("walk") / "index"
    build_index(_docs(), root)
    return root


@pytest.fixture(scope="module")
def server(index: Path) -> Iterator[ServerThread]:
    settings = Settings.model_validate({"api": {"rate_limit_per_s": 0}, "search": {"use_vectors": False}})
    with ServerThread(create_app(settings, index_dir=index)) as running:
        yield running


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("TRAWL_TEST_ARTEFACTS") or tmp_path_factory.mktemp("screens"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_search_page_three_facet_explain_suggestion_and_the_home_page_during_a_backfill(
    server: ServerThread, index: Path, browser: object, artefacts: Path
) -> None:
    context = browser.new_context()  # type: ignore[attr-defined]
    page = context.new_page()
    refused: list[str] = []  # a CSP violation or a script error fails the walk
    page.on("console", lambda m: refused.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: refused.append(str(e)))
    page.on("response", lambda r: refused.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    shots: list[Path] = []

    def shot(name: str) -> None:
        shots.append(artefacts / f"{len(shots) + 1:02d}-{name}.png")
        page.screenshot(path=str(shots[-1]), full_page=True)

    # A query typed into the box.
    page.goto(server.url + "/")
    page.fill("input[name=q]", "guide ranking")
    page.click("button[type=submit]")
    page.wait_for_selector("#meta")
    assert page.inner_text("#meta").startswith("45 results · page 1 of 5")
    shot("query")

    # Page 3 by its number.
    page.click("nav.paging a.page:text-is('3')")
    page.wait_for_selector("span.page.current")
    assert page.inner_text("span.page.current") == "3"
    assert "page 3 of 5" in page.inner_text("#meta")
    assert page.locator(".result").count() == 10
    shot("page-3")

    # A facet narrows to one site, and its count is the new total.
    blog = page.locator("#facet-host a", has_text="blog.example")
    count = int(blog.locator("xpath=following-sibling::span[1]").inner_text().replace(",", ""))
    assert count == 15
    blog.click()
    page.wait_for_selector("#meta")
    assert page.inner_text("#meta").startswith(f"{count} results · page 1")
    urls = page.locator(".result .url").all_inner_texts()
    assert urls and all("://blog.example/" in u for u in urls)
    assert page.input_value("input[name=site]") == "blog.example"
    shot("facet")

    # Why this result: the parts add up to the score shown.
    page.click(".result >> nth=0 >> a.why")
    page.wait_for_selector("#score-parts")
    total = float(page.get_attribute("#score-parts", "data-score") or "nan")
    parts = [
        float(v or "nan")
        for v in page.locator("#score-parts tr[data-part]").evaluate_all(
            "rows => rows.map(r => r.dataset.part)"
        )
    ]
    assert len(parts) >= 2 and math.isclose(sum(parts), total, abs_tol=1e-6)
    shown = page.locator("#score-parts tr[data-part] td.num:nth-child(3)").all_inner_texts()
    assert len(shown) == len(parts) and not {"+0.0000", "-0.0000"} & set(shown)  # no row of nothing
    shot("explain")

    # A suggestion from the box's list, taken: its page comes first.
    page.goto(server.url + "/")
    page.type("input[name=q]", "asy")
    page.wait_for_function("() => document.querySelectorAll('#suggestions option').length > 0")
    offered = page.locator("#suggestions option").evaluate_all("os => os.map(o => o.value)")
    assert offered[0] == "Asynchronous I/O with asyncio"
    shot("suggestions")
    page.fill("input[name=q]", offered[0])
    page.press("input[name=q]", "Enter")
    page.wait_for_selector(".result")
    assert page.locator(".result h2").first.inner_text() == offered[0]

    # The home page while an embeddings backfill runs says what /healthz says.
    generation = httpx.get(server.url + "/healthz").json()["generation"]
    write_progress(
        index,
        BackfillProgress(
            "embedding", done=450, total=1000, rate=30.0, eta_s=18.0, model_id="m", generation=generation
        ),
    )
    health = httpx.get(server.url + "/healthz").json()
    page.goto(server.url + "/")
    page.wait_for_selector("#live")
    assert health["state"] == "embedding, 45%" == page.inner_text("#live-state")
    assert page.inner_text("#live-ranker") == health["ranker"]
    assert page.inner_text("#live-generation") == generation
    assert "running now (embedding, 45%)" in health["ranker_reason"]
    assert "450 of 1,000 passages" in page.inner_text("#live")
    shot("backfill")

    assert refused == []
    assert all(s.stat().st_size > 1000 and s.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for s in shots)
    context.close()
