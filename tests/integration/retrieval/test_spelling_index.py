"""Spelling suggestions and rewrites on real indexes built on disk, through the served path."""

from __future__ import annotations

import importlib
import inspect
import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.app import create_app
from core.settings import SearchSettings, Settings
from core.types import Document, SearchResponse
from retrieval.index.build import build_index
from retrieval.index.layout import vocabulary_file
from retrieval.index.vocabulary import Vocabulary
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.conftest import ServerThread
from tests.fixtures.docs import make_doc

MODULES = (
    "argparse asyncio.events base64 bisect calendar collections configparser contextlib copy csv "
    "dataclasses datetime decimal difflib email.message enum fnmatch fractions functools getopt glob "
    "gzip hashlib heapq hmac html.parser http.client inspect io ipaddress itertools json logging "
    "mimetypes operator optparse os pathlib pickle pprint queue random re sched secrets selectors "
    "shlex shutil signal socket sqlite3 statistics string struct subprocess tarfile tempfile textwrap "
    "threading timeit tokenize traceback types unittest urllib.parse urllib.request uuid "
    "warnings weakref xml.etree.ElementTree zipfile zlib"
).split()
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def stdlib_docs() -> list[Document]:
    """A Python-docs-like corpus: one page per documented stdlib module, class and function."""
    docs: list[Document] = []
    for name in MODULES:
        module = importlib.import_module(name)
        members = [(name, module)] + sorted(
            (f"{name}.{n}", o) for n, o in vars(module).items() if not n.startswith("_")
        )
        for qualified, obj in members:
            if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismodule(obj)):
                continue
            text = inspect.getdoc(obj)
            if text and qualified not in {d.title for d in docs}:
                url = f"https://docs.python.org/3/library/{qualified}.html"
                docs.append(make_doc(url, qualified, text, lang="en"))
    return docs


def misspell(word: str, kind: int, rng: random.Random) -> str:
    """One deletion (0), transposition of neighbours (1) or substitution (2), never of the first letter."""
    i = rng.randrange(1, len(word) - 1)
    if kind == 0:
        return word[:i] + word[i + 1 :]
    if kind == 1:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    return word[:i] + rng.choice(LETTERS.replace(word[i], "")) + word[i + 1 :]


def corrected(response: SearchResponse) -> str | None:
    """What the response proposes instead of the query: the rewrite it served, or its suggestion."""
    return response.query.raw if response.rewritten_from is not None else response.suggestion


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("spelling") / "index"
    build_index(stdlib_docs(), out, shards=2)
    return out


@pytest.fixture(scope="module")
def service(index: Path) -> Iterator[SearchService]:
    with_cache_off = SearchSettings(cache_entries=0)
    service = SearchService.open(index, with_cache_off)
    yield service
    service.close()


@pytest.fixture(scope="module")
def vocabulary(index: Path) -> Vocabulary:
    return Vocabulary.load(vocabulary_file(index))


def known_words(vocabulary: Vocabulary, min_chars: int = 1) -> list[str]:
    known = SearchSettings().spell_known_df
    return sorted(w for w, df in vocabulary.df.items() if df >= known and len(w) >= min_chars)


def test_build_writes_surface_words_not_stems(vocabulary: Vocabulary) -> None:
    assert vocabulary.docs > 1000
    assert vocabulary.df["returns"] > 10 and vocabulary.df["return"] > 10  # two words, one stem
    assert "librari" not in vocabulary.df and "library" in vocabulary.df
    assert not any(any(ch.isdigit() for ch in w) for w in vocabulary.df)


def test_seeded_misspellings_get_the_right_suggestion(service: SearchService, vocabulary: Vocabulary) -> None:
    rng = random.Random(20240611)
    words = known_words(vocabulary, min_chars=5)
    rng.shuffle(words)
    cases: list[tuple[str, str]] = []
    for word in words:
        typo = misspell(word, len(cases) % 3, rng)
        if typo not in vocabulary.df:
            cases.append((word, typo))
        if len(cases) == 300:
            break
    assert len(cases) >= 100
    right = sum(corrected(service.search(SearchRequest(typo))) == word for word, typo in cases)
    rate = right / len(cases)
    print(f"spelling: {right}/{len(cases)} seeded misspellings corrected ({rate:.1%})")
    assert rate >= 0.90


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_correctly_spelled_queries_are_never_corrected(
    service: SearchService, vocabulary: Vocabulary, data: st.DataObject
) -> None:
    words = data.draw(st.lists(st.sampled_from(known_words(vocabulary)), min_size=1, max_size=4))
    styled = [data.draw(st.sampled_from([w, w.title(), w.upper()])) for w in words]
    raw = data.draw(st.sampled_from(["{}", '"{}"', "{} site:docs.python.org", "{} 3.12"])).format(
        " ".join(styled)
    )
    response = service.search(SearchRequest(raw))
    assert response.suggestion is None and response.rewritten_from is None
    assert response.query.raw == raw


def test_rewrite_only_below_the_result_threshold(tmp_path: Path) -> None:
    docs = [
        make_doc(f"https://example.org/python-{i}", f"Python {i}", "python release notes") for i in range(6)
    ] + [make_doc(f"https://example.org/sorting-{i}", "Sorting", "sorting howto with keys") for i in range(2)]
    index = tmp_path / "index"
    build_index(docs, index)
    service = SearchService.open(index, SearchSettings(cache_entries=0, spell_rewrite_below=3))
    try:
        none_found = service.search(SearchRequest("pythom"))
        assert none_found.rewritten_from == "pythom" and none_found.query.raw == "python"
        assert none_found.total == 6 and none_found.suggestion is None

        two_found = service.search(SearchRequest("sorting pythom"))  # 2 results < 3: rewritten
        assert two_found.rewritten_from == "sorting pythom" and two_found.total == 8

        # 6 results, but "pythom" is on no page: the pages found hold "release" only.
        six_found = service.search(SearchRequest("release pythom"))
        assert six_found.rewritten_from == "release pythom" and six_found.query.raw == "release python"
        assert six_found.total == 6

        as_typed = service.search(SearchRequest("pythom", spell=False))
        assert as_typed.total == 0 and as_typed.suggestion is None and as_typed.rewritten_from is None
    finally:
        service.close()
    never = SearchService.open(index, SearchSettings(cache_entries=0, spell_rewrite_below=0))
    try:
        offered = never.search(SearchRequest("pythom"))
        assert offered.total == 0 and offered.rewritten_from is None and offered.suggestion == "python"
    finally:
        never.close()


def test_a_rare_word_some_page_holds_is_only_suggested_a_correction(tmp_path: Path) -> None:
    docs = [
        make_doc(f"https://example.org/python-{i}", f"Python {i}", "python release notes") for i in range(30)
    ] + [make_doc("https://example.org/typo", "Notes", "release notes for pythom users")]
    index = tmp_path / "index"
    build_index(docs, index)
    service = SearchService.open(index, SearchSettings(cache_entries=0, spell_rewrite_below=3))
    try:
        held = service.search(SearchRequest("release pythom"))  # 31 results, every word on a page
        assert held.rewritten_from is None and held.suggestion == "release python"
        assert held.query.raw == "release pythom" and held.total == 31
        missing = service.search(SearchRequest("notes pythonn"))  # "pythonn" is on no page
        assert missing.rewritten_from == "notes pythonn" and missing.query.raw == "notes python"
    finally:
        service.close()


def test_index_without_vocabulary_serves_without_suggestions(tmp_path: Path) -> None:
    index = tmp_path / "index"
    build_index([make_doc("https://example.org/a", "Python", "python release notes")], index)
    vocabulary_file(index).unlink()
    service = SearchService.open(index, SearchSettings(cache_entries=0))
    try:
        response = service.search(SearchRequest("pythom"))
        assert response.total == 0 and response.suggestion is None and response.rewritten_from is None
    finally:
        service.close()


@pytest.fixture(scope="module")
def client(index: Path) -> Iterator[httpx.Client]:
    # A deadline no loaded machine misses: a partial answer offers no suggestion.
    settings = Settings.model_validate({"search": {"deadline_s": 60.0}})
    with ServerThread(create_app(settings, index_dir=index)) as server:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            yield c


@pytest.fixture(scope="module")
def suggesting_client(index: Path) -> Iterator[httpx.Client]:
    """A service that never rewrites (``spell_rewrite_below = 0``): it only suggests."""
    settings = Settings.model_validate({"search": {"deadline_s": 60.0, "spell_rewrite_below": 0}})
    with ServerThread(create_app(settings, index_dir=index)) as server:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            yield c


def test_api_returns_the_suggestion(client: httpx.Client, suggesting_client: httpx.Client) -> None:
    # "evnet" is on no page: the three results hold "asyncio" and "loop" only, so the correction is served.
    body = client.get("/v1/search", params={"q": "asyncio evnet loop"}).json()
    assert body["rewritten_from"] == "asyncio evnet loop" and body["query"] == "asyncio event loop"
    offered = suggesting_client.get("/v1/search", params={"q": "asyncio evnet loop"}).json()
    assert offered["total"] >= 3
    assert offered["suggestion"] == "asyncio event loop" and offered["rewritten_from"] is None
    rewritten = client.get("/v1/search", params={"q": "dictionnary"}).json()
    assert rewritten["rewritten_from"] == "dictionnary" and rewritten["query"] == "dictionary"
    assert rewritten["total"] > 0
    exact = client.get("/v1/search", params={"q": "dictionnary", "spell": "false"}).json()
    assert exact["total"] == 0 and exact["rewritten_from"] is None and exact["suggestion"] is None


def test_web_page_offers_the_correction_and_the_original(
    client: httpx.Client, suggesting_client: httpx.Client
) -> None:
    page = suggesting_client.get("/", params={"q": "asyncio evnet loop"}).text
    assert 'id="suggestion"' in page and "asyncio event loop</a>?" in page
    page = client.get("/", params={"q": "asyncio evnet loop"}).text
    assert 'id="rewritten"' in page and "Showing results for <strong>asyncio event loop</strong>" in page
    page = client.get("/", params={"q": "dictionnary"}).text
    assert 'id="rewritten"' in page and "Showing results for <strong>dictionary</strong>" in page
    assert "q=dictionnary" in page and "spell=0" in page
    original = client.get("/", params={"q": "dictionnary", "spell": "0"}).text
    assert 'id="no-results"' in original and 'id="rewritten"' not in original


def test_a_word_only_in_pages_indexed_since_the_build_is_not_corrected_away(tmp_path: Path) -> None:
    """The vocabulary is written by the build; the incremental indexer adds pages after it.
    A word only those pages hold ("lisp") must be treated as it is after a rebuild (a word
    of one page: corrected only to a far more frequent word), not as a typo of "list"
    rewritten away from the one fresh page that has it."""
    import dataclasses

    from core.crawldir import CrawlDir
    from core.docstore import DocStore
    from retrieval.index.incremental import IncrementalIndexer

    old = [
        make_doc(f"https://example.org/list-{i}", f"List {i}", "list methods and slicing") for i in range(6)
    ]
    fresh = make_doc("https://example.org/lisp", "Lisp", "lisp macros and closures")
    data, index = tmp_path / "crawl", tmp_path / "index"
    DocStore(CrawlDir(data).docs).append([dataclasses.replace(d, fetched_at=100.0) for d in old])
    indexer = IncrementalIndexer(data, index, shards=2)
    indexer.compact()
    DocStore(CrawlDir(data).docs).append([dataclasses.replace(fresh, fetched_at=200.0)])
    assert indexer.step() is not None
    service = SearchService.open(
        index, SearchSettings(cache_entries=0, spell_rewrite_below=3, use_vectors=False)
    )
    try:
        response = service.search(SearchRequest("lisp"))
        assert response.rewritten_from is None and response.suggestion is None, response
        assert [h.url for h in response.hits] == [fresh.url]
        typo = service.search(SearchRequest("lisst"))  # a typo of an old word is still corrected
        assert typo.rewritten_from == "lisst" and typo.total == 6
    finally:
        service.close()
    rebuilt = tmp_path / "rebuilt"
    build_index([*old, fresh], rebuilt)
    same = SearchService.open(
        rebuilt, SearchSettings(cache_entries=0, spell_rewrite_below=3, use_vectors=False)
    )
    try:
        assert same.search(SearchRequest("lisp")).rewritten_from is None  # what a rebuild serves
    finally:
        same.close()
