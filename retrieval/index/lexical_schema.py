"""What a lexical shard is on disk: its Tantivy fields, the text limits, its manifest.

Text is analysed in Python (:mod:`retrieval.text.tokenizer`) and indexed with Tantivy's
``whitespace`` tokenizer, positions kept so phrases work. The original title, URL,
headings and body are kept as one stored JSON payload for snippets and display.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import tantivy

from core.errors import ManifestError
from core.types import Section
from retrieval.index.layout import lexical_manifest
from retrieval.text.stopword_search import CAPTIONS_FIELD

FORMAT_VERSION = 2
"""2: the ``captions`` field (titles and headings with their stopwords, retrieval.text.stopword_search)."""
TEXT_FIELDS: tuple[str, ...] = ("title", "headings", "body", "anchors")
"""The fields every query and every per-field feature scores."""
LENGTH_FIELDS: tuple[str, ...] = (*TEXT_FIELDS, CAPTIONS_FIELD)
"""Every indexed text field: what ballast and the lengths table keep per document."""
MAX_HEADINGS_CHARS = 20_000
MAX_BODY_CHARS = 1_000_000
"""Body text past this is neither indexed nor stored: a search page is not an archive."""


def stored_sections(sections: Sequence[Section], body: str, stored_body: str) -> list[list[Any]]:
    """The payload's ``sections``: ``[heading, anchor, start, end]`` of each section a link can
    open (an anchor) within the stored body. None when the stored body is not the document's
    own from its start (whitespace normalised away): the offsets would point elsewhere."""
    if not sections or not body.startswith(stored_body):
        return []
    cut = len(stored_body)
    return [[s.heading, s.anchor, s.start, min(s.end, cut)] for s in sections if s.anchor and s.start < cut]


def read_sections(value: Any) -> tuple[Section, ...]:
    """The payload's ``sections`` as read back (an index built before has none)."""
    return tuple(Section(str(h), str(a), int(start), int(end)) for h, a, start, end in value or ())


def build_schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_unsigned_field("doc_id", stored=True, indexed=True, fast=True)
    sb.add_text_field("url", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("external_id", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("site", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("lang", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("filetype", stored=False, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("kind", stored=False, tokenizer_name="raw", index_option="basic")
    for name in LENGTH_FIELDS:
        sb.add_text_field(name, stored=False, tokenizer_name="whitespace", index_option="position")
    sb.add_float_field("pagerank", stored=False, fast=True)
    sb.add_float_field("published_at", stored=False, fast=True)
    sb.add_unsigned_field("body_words", stored=False, fast=True)
    sb.add_bytes_field("payload", stored=True)
    return sb.build()


def host_suffixes(host: str) -> list[str]:
    """``docs.python.org`` → ``[docs.python.org, python.org, org]``: what ``site:`` matches."""
    host = host.lower().strip(".")
    if host.startswith("www."):
        host = host[4:]
    parts = host.split(".") if host else []
    return [".".join(parts[i:]) for i in range(len(parts))]


def explicit_port(url: str) -> int | None:
    """The port a URL names (``site:host:port`` matches it); None for the scheme's default."""
    try:
        port = urlsplit(url).port
    except ValueError:
        return None
    return port if port not in (None, 80, 443) else None


def read_lexical_manifest(path: Path) -> dict[str, Any]:
    """The manifest of the lexical shard at ``path``; ``ManifestError`` when there is none or
    it has another format (reading it costs nothing next to opening the shard)."""
    manifest_path = lexical_manifest(path)
    if not manifest_path.exists():
        raise ManifestError(
            f"{path} is not a Trawl lexical index (no {manifest_path.name}); build one with `trawl index`."
        )
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ManifestError(
            f"{path} has index format {manifest.get('format_version')}, "
            f"this Trawl reads {FORMAT_VERSION}; rebuild it with `trawl index`."
        )
    return manifest
