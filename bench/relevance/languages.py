"""Relevance per language: the Debian Reference in six languages, one index, MRR@10 beside English.

    apt-get install debian-reference-{en,de,es,fr,ja,zh-cn}
    .venv/bin/python bench/relevance/languages.py [--per-language 200] [--seed 0] [--rebuild]

The book (/usr/share/debian-reference) is served on loopback and crawled whole, all six editions
in one index (``training.crawl_sets.build_crawl_set``, as ``trawl dataset crawl-sets --root``
does; kept in ``--out``, reused unless ``--rebuild``). Known-item queries are typed from each
edition's headings as issue 52 typed its own, with a fixed seed (:func:`make_queries` says how).
``trawl eval --json`` scores them through the served path with bm25 and the default ranker (``ltr``,
the packaged model), each twice in one run: read in the query's language (``metadata.lang``, a
reader's ``Accept-Language``) and "as English" (no reader language: English analysis alone, what
every query got before DECISIONS 77). A query's kind is its language, so ``by_kind`` is the table.
Results go to stdout and bench/results/languages.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.results_file import record_run  # noqa: E402
from cli.ports import free_port  # noqa: E402
from training.crawl_sets import build_crawl_set  # noqa: E402

BOOK = Path("/usr/share/debian-reference")
RESULTS = REPO / "bench" / "results" / "languages.md"
INTRO = (
    "# Relevance per language: the Debian Reference in six languages\n\nMade by "
    "`bench/relevance/languages.py`. Goal (issue 52): every language's MRR@10 within .05 of "
    "English's, with bm25 and with the default ranker.\n"
)
EDITIONS = {"en": "en", "de": "de", "es": "es", "fr": "fr", "ja": "ja", "zh-cn": "zh"}
ORDER = ("en", "de", "es", "fr", "ja", "zh")
RANKERS = {
    "bm25": ["--ranker", "bm25"],
    "ltr": ["--ranker", "ltr", "--model", "models/ltr/default"],
    "dense": ["--ranker", "dense"],
    "hybrid": ["--ranker", "hybrid"],
}
DEFAULT_RANKERS = ("bm25", "ltr")
"""The issue's two; ``dense`` and ``hybrid`` show what the English MiniLM does per language."""
MAX_JUDGED = 3
_NUMBER = re.compile(r"^\s*(?:[\dA-Z]+\.)+\s*")
_WORD = re.compile(r"[^\W_][\w'’-]*")
_JA_WORD = re.compile(r"[\u4e00-\u9fff\u3005]{2,}|[\u30a0-\u30ff]{2,}")
_HAN_RUN = re.compile(r"[\u4e00-\u9fff]{4,}")


def edition(url: str) -> str:
    """The language a book page is written in, from its file name (``ch02.zh-cn.html`` → zh)."""
    parts = url.rsplit("/", 1)[-1].split(".")
    return EDITIONS.get(parts[-2], "") if len(parts) >= 3 else ""


def query_of(heading: str, lang: str, rng: random.Random) -> str | None:
    """One query typed from ``heading`` the way the issue's readers would, or None when it has none."""
    text = _NUMBER.sub("", heading).strip()
    if lang == "ja":
        found = _JA_WORD.findall(text)
        return rng.choice(found) if found else None
    if lang == "zh":
        runs = _HAN_RUN.findall(text)
        return rng.choice(runs)[:4] if runs else None
    words = _WORD.findall(text)
    size = rng.choice((2, 3))
    starts = [
        i
        for i in range(len(words) - size + 1)
        if any(len(w) >= 4 for w in words[i : i + size]) and all(w[0].isalpha() for w in words[i : i + size])
    ]
    if not starts:
        return None
    start = rng.choice(starts)
    return " ".join(words[start : start + size])


def searchable(heading: str, lang: str) -> str:
    """The form a query is looked for in: folded, and for spaced scripts its words joined by one space."""
    if lang in ("ja", "zh"):
        return heading.casefold()
    return " " + " ".join(_WORD.findall(heading)).casefold() + " "


def make_queries(corpus: Path, per_language: int, seed: int) -> list[dict[str, Any]]:
    """Up to ``per_language`` judged queries per edition: ``{_id, text, lang, judged}``.

    One query per heading (number prefix dropped), headings taken in a
    ``random.Random(f"{seed}:{lang}")`` shuffle of their sorted list: two or three consecutive words
    with one of four letters or more (count and start drawn from the same generator); for Japanese
    one kanji or katakana word (a run of two or more); for Chinese the first four characters of a
    run of four or more Han characters (:func:`query_of`). A query is judged for every page of its
    edition whose headings hold it; one held by more than ``MAX_JUDGED`` pages is no known item,
    and one also in another edition's headings is skipped: an untranslated heading tests no
    language (French chapter 7 keeps many English ones)."""
    headings: dict[str, list[tuple[str, str]]] = {lang: [] for lang in ORDER}
    with corpus.open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            lang = edition(record["_id"])
            if lang:
                for heading in record["metadata"].get("headings") or ():
                    headings[lang].append((record["_id"], heading))
    out: list[dict[str, Any]] = []
    for lang in ORDER:
        rng = random.Random(f"{seed}:{lang}")
        pages = sorted(set(headings[lang]))
        rng.shuffle(pages)
        seen: set[str] = set()
        made = 0
        for _, heading in pages:
            text = query_of(heading, lang, rng)
            if not text or text.casefold() in seen:
                continue
            seen.add(text.casefold())
            key = text.casefold() if lang in ("ja", "zh") else f" {text.casefold()} "
            judged = sorted({url for url, h in headings[lang] if key in searchable(h, lang)})
            elsewhere = any(
                key in searchable(h, lang) for other in ORDER if other != lang for _, h in headings[other]
            )
            if not judged or len(judged) > MAX_JUDGED or elsewhere:
                continue
            made += 1
            out.append({"_id": f"{lang}-{made:03d}", "text": text, "lang": lang, "judged": judged})
            if made == per_language:
                break
    return out


def write_dataset(crawl_set: Path, out: Path, queries: list[dict[str, Any]], *, readers: bool = True) -> None:
    """A BEIR collection: the crawl's corpus (the file itself, so the eval cache keys on it), the
    queries with their language as ``metadata.kind`` and, with ``readers``, as the reader's
    (``metadata.lang``, what ``Accept-Language`` would say), and their judgments."""
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.jsonl"
    if not corpus.exists() or corpus.read_bytes() != (crawl_set / "corpus.jsonl").read_bytes():
        corpus.write_bytes((crawl_set / "corpus.jsonl").read_bytes())
    with (out / "queries.jsonl").open("w", encoding="utf-8") as handle:
        for q in queries:
            metadata = {"kind": q["lang"], **({"lang": q["lang"]} if readers else {})}
            record = {"_id": q["_id"], "text": q["text"], "metadata": metadata}
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    (out / "qrels").mkdir(exist_ok=True)
    rows = [f"{q['_id']}\t{url}\t1\n" for q in queries for url in q["judged"]]
    (out / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(rows), encoding="utf-8")


def evaluate(dataset: Path, ranker: str) -> dict[str, Any]:
    """``trawl eval --json`` of one ranker: the served path, per language in ``by_kind``."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "cli.main", "eval", "--dataset", str(dataset), *RANKERS[ranker]]
    command.append("--json")
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"trawl eval --ranker {ranker} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def table(results: dict[str, dict[str, Any]]) -> list[str]:
    header = "| language | queries | " + " | ".join(f"{r} MRR@10 | Δ vs en" for r in results) + " |"
    lines = [header, "|---|---|" + "---|---|" * len(results)]
    for lang in ORDER:
        cells = []
        queries = 0
        for result in results.values():
            kinds = result["by_kind"]
            if lang not in kinds:
                continue
            queries = kinds[lang]["queries"]
            mrr, english = kinds[lang]["mrr@10"], kinds["en"]["mrr@10"]
            delta = "—" if lang == "en" else f"{mrr - english:+.4f}"
            cells.append(f"{mrr:.4f} | {delta}")
        if cells:
            lines.append(f"| {lang} | {queries} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--per-language", type=int, default=200, help="60 (the issue's) moves a language ±.05 by seed."
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rebuild", action="store_true", help="Crawl the book again.")
    parser.add_argument("--ranker", action="append", choices=list(RANKERS), help="Default: bm25, ltr.")
    parser.add_argument("--out", type=Path, default=REPO / "data" / "eval-crawl")
    parser.add_argument("--no-record", action="store_true", help="Print only; leave the results file.")
    args = parser.parse_args(argv)
    if not (BOOK / "index.html").exists():
        raise SystemExit(f"{BOOK} is missing: apt-get install debian-reference-{{en,de,es,fr,ja,zh-cn}}")
    started = time.perf_counter()
    load = os.getloadavg()[0]
    crawl_set, dataset = args.out / "debref-crawl", args.out / "debref-languages"
    if args.rebuild or not (crawl_set / "corpus.jsonl").exists():
        build_crawl_set("debref", crawl_set, site_port=free_port(), root=BOOK)
    queries = make_queries(crawl_set / "corpus.jsonl", args.per_language, args.seed)
    results: dict[str, dict[str, Any]] = {}
    for ranker in args.ranker or DEFAULT_RANKERS:
        for readers in (False, True):
            write_dataset(crawl_set, dataset, queries, readers=readers)
            results[ranker if readers else f"{ranker} as English"] = evaluate(dataset, ranker)
    seconds = time.perf_counter() - started
    pages = len((dataset / "corpus.jsonl").read_text(encoding="utf-8").splitlines())
    command = "bench/relevance/languages.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    examples = queries[:: max(1, len(queries) // 12)]
    body = [
        f"Command: `.venv/bin/python {command}`; {platform.machine()}, {os.cpu_count()} cores, load "
        f"average {load:.2f} before; {seconds:.0f} s.",
        "",
        f"{len(queries)} queries (seed {args.seed}) over {pages} pages in one index; ltr is the packaged "
        "model (models/ltr/default).",
        "",
        *table(results),
        "",
        "Examples: " + ", ".join(f"{q['lang']} `{q['text']}`" for q in examples),
    ]
    text = "\n".join(body)
    print(text)
    if not args.no_record:
        record_run(RESULTS, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), text, intro=INTRO)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
