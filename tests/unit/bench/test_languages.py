"""The per-language bench's queries: typed from headings per script, judged, seeded, and its table."""

from __future__ import annotations

import json
import random
from pathlib import Path

from bench.relevance.languages import edition, make_queries, query_of, table

HEADINGS = {
    "ch02.en.html": ["Chapter 2. Debian package management", "2.1.1. Package configuration"],
    "ch02.de.html": ["Kapitel 2. Debian-Paketmanagement", "2.1.1. Paketkonfiguration (Einrichtung)"],
    "ch02.fr.html": ["Chapitre 2. Gestion des paquets Debian", "2.1.2. Dynamic call tracing"],
    "ch07.en.html": ["7.1. Dynamic call tracing"],
    "ch02.ja.html": ["第2章 Debian パッケージ管理", "2.1.1. パッケージ設定"],
    "ch02.zh-cn.html": ["第 2 章 Debian 软件包管理", "2.1.4. Debian 档案库基础"],
}


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for name, headings in HEADINGS.items():
            record = {"_id": f"http://127.0.0.1:1/{name}", "text": "", "metadata": {"headings": headings}}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def test_an_edition_is_read_from_the_file_name() -> None:
    assert edition("http://h/ch02.zh-cn.html") == "zh"
    assert edition("http://h/apa.de.html") == "de"
    assert edition("http://h/index.html") == ""


def test_queries_are_typed_per_script() -> None:
    rng = random.Random(0)
    for _ in range(20):
        zh = query_of("2.1.4. Debian 档案库基础", "zh", rng)
        assert zh == "档案库基", zh  # the first four characters of the run
        assert query_of("2.1.1. パッケージ設定", "ja", rng) in ("パッケージ", "設定")
        words = query_of("2.1. Debian package management prerequisites", "en", rng)
        assert words is not None and 2 <= len(words.split()) <= 3
        assert words in "Debian package management prerequisites" and not words[0].isdigit()
    assert query_of("1.2. 第一", "zh", rng) is None  # no run of four Han characters
    assert query_of("2.1. A b", "en", rng) is None  # no word of four letters


def test_queries_are_judged_for_their_pages_seeded_and_never_untranslated(tmp_path: Path) -> None:
    queries = make_queries(_corpus(tmp_path), per_language=5, seed=3)
    assert queries == make_queries(_corpus(tmp_path), per_language=5, seed=3)
    for q in queries:
        name = "zh-cn" if q["lang"] == "zh" else q["lang"]
        assert q["judged"] == [f"http://127.0.0.1:1/ch02.{name}.html"]
    # "Dynamic call tracing" is also an English heading: no test of French.
    assert not [q for q in queries if q["lang"] == "fr" and "call" in q["text"].lower()]
    assert {q["lang"] for q in queries} >= {"en", "de", "ja", "zh"}
    assert len({q["_id"] for q in queries}) == len(queries)


def test_the_table_puts_each_language_beside_english() -> None:
    kinds = {"en": {"queries": 2, "mrr@10": 0.9}, "fr": {"queries": 2, "mrr@10": 0.8}}
    lines = table({"bm25": {"by_kind": kinds}})
    assert lines[2] == "| en | 2 | 0.9000 | — |"
    assert lines[3] == "| fr | 2 | 0.8000 | -0.1000 |"
