"""``/static/suggest.js`` in a real browser: typing fills the search box's datalist from /v1/suggest.

The pages load it themselves (``<script src defer>``) under a CSP of ``script-src 'self'``: the
test runs with the CSP enforced, so an inline script or a foreign origin would fail it.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from api.app import create_app
from core.settings import Settings
from retrieval.index.build import build_index
from tests.conftest import ServerThread
from tests.fixtures.docs import SMALL_WEB

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    index = tmp_path_factory.mktemp("suggest-ui") / "index"
    build_index(SMALL_WEB, index)
    settings = Settings.model_validate({"api": {"rate_limit_per_s": 0}, "search": {"use_vectors": False}})
    with ServerThread(create_app(settings, index_dir=index)) as running:
        yield running


def test_typing_offers_the_suggestions_of_the_text_in_the_box(server: ServerThread, browser: object) -> None:
    wanted = httpx.get(server.url + "/v1/suggest", params={"q": "list c", "size": 8}).json()["suggestions"]
    assert wanted
    context = browser.new_context()  # type: ignore[attr-defined]
    page = context.new_page()
    blocked: list[str] = []
    page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/v1/suggest" in r.url else None)
    page.goto(server.url + "/")
    page.wait_for_function("() => document.querySelector('input[name=q]').getAttribute('list')")
    assert page.get_attribute("input[name=q]", "list") == "suggestions"
    page.type("input[name=q]", "list c")
    page.wait_for_function(
        "texts => JSON.stringify([...document.querySelectorAll('#suggestions option')].map(o => o.value))"
        " === JSON.stringify(texts)",
        arg=[s["text"] for s in wanted],
    )
    assert asked and all("/v1/suggest?size=8&q=" in url for url in asked)
    assert asked[-1].endswith("q=list%20c")
    page.fill("input[name=q]", "")  # an empty box asks nothing and offers nothing
    page.wait_for_function("() => document.querySelectorAll('#suggestions option').length === 0")
    page.click("button[type=submit]")  # the form still submits as typed
    assert blocked == []
    context.close()
