"""Extraction peers for bench_crawl.py: compiled HTML-to-text extractors on the same pages.

Run with ``/tmp/extract-peers-venv/bin/python`` (never a Trawl dependency); make it with

    python3.11 -m venv /tmp/extract-peers-venv
    /tmp/extract-peers-venv/bin/pip install resiliparse==2.0.1 html-to-markdown==3.21.2 selectolax==1.0.2

Issue 16 sets Trawl's extraction against bare selectolax (parse, body text, link
attributes): no boilerplate removal, no block-aware text, no fingerprints. These peers
do part of Trawl's job in compiled code, so they say what that job costs outside Python:
resiliparse's main-content extractor (boilerplate removal, lexbor underneath, Cython),
its plain-text extractor (block-aware text, no removal), and html-to-markdown (Rust,
block-aware text as Markdown). None of them also returns links or fingerprints.
Bare selectolax (:func:`bare_selectolax`, which ``bench_crawl.py`` runs too) runs here
as well, so each ratio comes from one process; CPU time, each extractor's best of
``--rounds``, the extractors taking turns. Prints one JSON line: ``{"bare": pages/s,
"peers": {name: pages/s}}``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

from selectolax.lexbor import LexborHTMLParser

BARE = "bare"


def bare_selectolax(html: str) -> object:
    """The yardstick of issue 16: parse, the body's text, every link's ``href``; nothing else."""
    tree = LexborHTMLParser(html)
    if tree.body is not None:
        tree.body.text(separator=" ")
    return [a.attributes.get("href") for a in tree.css("a[href]")]


def _extractors() -> dict[str, Callable[[str], object]]:
    """The bare yardstick under ``BARE``, then each peer by name and version."""
    import html_to_markdown
    from resiliparse.extract.html2text import extract_plain_text
    from resiliparse.parse.html import HTMLTree

    def resiliparse_main(html: str) -> object:
        return extract_plain_text(HTMLTree.parse(html), main_content=True)

    def resiliparse_plain(html: str) -> object:
        return extract_plain_text(HTMLTree.parse(html), main_content=False, preserve_formatting=False)

    return {
        BARE: bare_selectolax,
        f"resiliparse {version('resiliparse')} main-content text": resiliparse_main,
        f"resiliparse {version('resiliparse')} plain text": resiliparse_plain,
        f"html-to-markdown {version('html-to-markdown')} (Rust)": html_to_markdown.convert,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pages", type=Path, help="A file with one page path per line (UTF-8 HTML).")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    texts = [Path(line).read_bytes().decode("utf-8", "replace") for line in args.pages.read_text().split()]
    extractors = _extractors()
    best = dict.fromkeys(extractors, float("inf"))
    for _ in range(args.rounds):
        for name, extract in extractors.items():
            started = time.process_time()
            for text in texts:
                extract(text)
            best[name] = min(best[name], time.process_time() - started)
    rates = {name: len(texts) / seconds for name, seconds in best.items()}
    print(json.dumps({"bare": rates.pop(BARE), "peers": rates}))


if __name__ == "__main__":
    main()
