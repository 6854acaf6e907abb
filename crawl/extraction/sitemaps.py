"""Sitemap XML (urlset and sitemapindex, plain or gzipped) to URL lists.

Sitemaps tell the crawler about pages no link reaches, and with ``<lastmod>`` when a
page last changed (a recrawl hint, ``crawl.frontier.tiers``). They are fetched through the
frontier like pages (so they wait for the host's politeness slot) and parsed here.
Python's expat does not resolve external entities, so parsing untrusted XML is safe
from XXE; the size cap bounds the rest.
"""

from __future__ import annotations

import gzip
import logging
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

logger = logging.getLogger(__name__)

__all__ = ["SitemapEntries", "parse_lastmod", "parse_sitemap"]

MAX_SITEMAP_URLS = 50_000


@dataclass(frozen=True, slots=True)
class SitemapEntries:
    pages: tuple[str, ...] = ()
    sitemaps: tuple[str, ...] = ()
    """Child sitemaps of a sitemap index."""
    lastmod: Mapping[str, float] = field(default_factory=dict, compare=False)
    """Page URL → its ``<lastmod>`` (Unix seconds), for the pages that give a readable one:
    a hint about the listed pages, not part of the listing."""


def parse_lastmod(text: str) -> float | None:
    """A W3C datetime (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``, ``YYYY-MM-DDThh:mm:ssZ``, with
    an offset or fractions) in Unix seconds; UTC where no offset is given; None if unreadable.

    Sitemaps' ``<lastmod>`` and pages' date metadata (``crawl.extraction.page``) use this format.

    >>> parse_lastmod("2024-01-01")  # date-format example
    1704067200.0
    >>> parse_lastmod("2024-01-01T01:00:00+01:00")
    1704067200.0
    """
    text = text.strip()
    if len(text) in (4, 7):  # YYYY, YYYY-MM
        text += "-01-01" if len(text) == 4 else "-01"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_sitemap(body: bytes, *, max_bytes: int = 50 * 1024 * 1024) -> SitemapEntries:
    """Page URLs and child sitemaps listed in a sitemap; empty for a malformed one."""
    if body[:2] == b"\x1f\x8b":
        try:
            body = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(body, max_bytes)
        except (zlib.error, gzip.BadGzipFile) as exc:
            logger.debug("Bad gzipped sitemap: %s", exc)
            return SitemapEntries()
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        logger.debug("Malformed sitemap: %s", exc)
        return SitemapEntries()
    kind = _local(root.tag)
    locations: list[str] = []
    lastmods: dict[str, float] = {}
    for element in root.iter():
        if _local(element.tag) == "loc" and element.text:
            locations.append(element.text.strip())
            if len(locations) >= MAX_SITEMAP_URLS:
                break
        elif _local(element.tag) == "url":
            _note_lastmod(element, lastmods)
    if kind == "sitemapindex":
        return SitemapEntries(sitemaps=tuple(locations))
    if kind == "urlset":
        return SitemapEntries(pages=tuple(locations), lastmod=lastmods)
    return SitemapEntries()


def _note_lastmod(entry: ET.Element, lastmods: dict[str, float]) -> None:
    """The ``<loc>`` and ``<lastmod>`` children of one ``<url>`` entry, when both are readable."""
    loc = when = None
    for child in entry:
        if _local(child.tag) == "loc" and child.text:
            loc = child.text.strip()
        elif _local(child.tag) == "lastmod" and child.text:
            when = parse_lastmod(child.text)
    if loc and when is not None:
        lastmods[loc] = when
