"""Query-time synonyms: loading the file, expanding queries, and ranking on a real index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.settings import SearchSettings
from retrieval.index.build import build_index
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from retrieval.text.analyzer import parse_query
from retrieval.text.synonyms import Synonyms
from tests.fixtures.docs import make_doc

REPO = Path(__file__).resolve().parents[3]

SYNONYMS = """
weight = 0.5
equivalent = [["dict", "dictionary"], ["regex", "regular expression"]]
[expand]
py = ["python"]
"""


def urls(service: SearchService, raw: str) -> list[str]:
    return [h.url for h in service.search(SearchRequest(raw, spell=False)).hits]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = [
        make_doc("https://example.org/dict", "Mapping types", "the dict type maps keys to values"),
        make_doc(
            "https://example.org/dictionary", "Mapping types", "the dictionary type maps keys to values"
        ),
        make_doc("https://example.org/re", "Text patterns", "a regular expression matches text"),
        make_doc("https://example.org/python", "Language", "python is a programming language"),
        make_doc("https://example.org/other", "Other", "keys values text language programming"),
    ]
    out = tmp_path_factory.mktemp("synonyms") / "index"
    build_index(docs, out)
    return out


@pytest.fixture(scope="module")
def service(index: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchService]:
    path = tmp_path_factory.mktemp("syn") / "synonyms.toml"
    path.write_text(SYNONYMS)
    service = SearchService.open(index, SearchSettings(synonyms_file=path, cache_entries=0))
    yield service
    service.close()


def test_a_synonym_finds_the_other_word_and_ranks_below_the_exact_match(service: SearchService) -> None:
    assert urls(service, "dict") == ["https://example.org/dict", "https://example.org/dictionary"]
    assert urls(service, "Dictionaries") == ["https://example.org/dictionary", "https://example.org/dict"]
    assert urls(service, "regex") == ["https://example.org/re"]  # a multi-word synonym is a phrase
    assert urls(service, "py") == ["https://example.org/python"]


def test_one_way_and_phrases_and_exclusions_are_not_expanded(service: SearchService) -> None:
    assert urls(service, "python") == ["https://example.org/python"]
    assert "https://example.org/py" not in urls(service, "python")
    assert urls(service, '"dict type"') == ["https://example.org/dict"]
    assert urls(service, "maps -dict") == ["https://example.org/dictionary"]


def test_without_a_file_there_are_no_synonyms(index: Path) -> None:
    plain = SearchService.open(index, SearchSettings(cache_entries=0))
    try:
        assert urls(plain, "dict") == ["https://example.org/dict"]
        assert plain.parse(SearchRequest("dict")).expansions == ()
    finally:
        plain.close()


def test_expansion_attaches_weighted_synonyms_to_free_terms_only() -> None:
    synonyms = Synonyms.from_groups([["dict", "dictionary"]], {"py": ["python"]}, weight=0.25)
    query = synonyms.expand(parse_query('dict py dict "dict x" -dict'))
    assert query.expansions == (("dictionary", 0.25), ("python", 0.25), ("dictionary", 0.25))
    assert synonyms.expand(parse_query("python")).expansions == ()


def test_the_example_file_loads() -> None:
    synonyms = Synonyms.load(REPO / "synonyms.example.toml")
    assert "dictionary" in synonyms.expansions["dict"] and synonyms.weight == 0.5


@pytest.mark.parametrize(
    "text",
    ["equivalent = [[1, 2]]", "weight = 2", "[expand]\npy = 'python'", "equivalent = [", "equivalent = 'x'"],
)
def test_a_bad_file_is_a_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "synonyms.toml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        Synonyms.load(path)
    with pytest.raises(ConfigError):
        Synonyms.load(tmp_path / "missing.toml")
