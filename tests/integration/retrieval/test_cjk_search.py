"""Chinese and Japanese pages found by part of a phrase: the same bigrams in pages, queries and snippets.

Before, a run of CJK characters was one word, so a query of its first four characters (how
people type a heading they half remember) matched nothing of it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from core.settings import SearchSettings
from retrieval.index.build import build_index
from retrieval.query.request import SearchRequest
from retrieval.query.service import SearchService
from tests.fixtures.docs import make_doc

DOCS = [
    make_doc(
        "https://ref.test/ja/network",
        "ネットワークの設定",
        "ネットワークインターフェースの設定方法を説明します。",
    ),
    make_doc("https://ref.test/ja/package", "パッケージ管理", "アプトによるパッケージ管理システムの使い方。"),
    make_doc("https://ref.test/zh/network", "网络设置", "本章介绍网络接口的配置方法和常用工具。"),
    make_doc("https://ref.test/zh/package", "软件包管理", "使用 APT 软件包管理系统安装和升级软件。"),
    make_doc("https://ref.test/en/package", "Package management", "Using the APT package management system."),
]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SearchService]:
    root = tmp_path_factory.mktemp("cjk") / "index"
    build_index(DOCS, root)
    opened = SearchService.open(root, SearchSettings(use_vectors=False, cache_entries=0))
    yield opened
    opened.close()


@pytest.mark.parametrize(
    ("typed", "wanted"),
    [
        ("ネットワ", "https://ref.test/ja/network"),  # the first four characters of a heading
        ("管理システム", "https://ref.test/ja/package"),  # a phrase from inside the text
        ("网络接口", "https://ref.test/zh/network"),
        ("软件包", "https://ref.test/zh/package"),
    ],
)
def test_part_of_a_phrase_finds_its_page_first(service: SearchService, typed: str, wanted: str) -> None:
    response = service.search(SearchRequest(typed, ranker="bm25", spell=False))
    assert response.hits and response.hits[0].url == wanted, [h.url for h in response.hits]
    assert f"<mark>{typed}</mark>" in response.hits[0].snippet  # highlighted as one run, not per bigram
