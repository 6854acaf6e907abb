"""Sitemap XML (urlset and sitemapindex, plain or gzipped) to URL lists.

Sitemaps tell the crawler about pages no link reaches. They are fetched through the
frontier like pages (so they wait for the host's politeness slot) and parsed here.
Python's expat does not resolve external entities, so parsing untrusted XML is safe
from XXE; the size cap bounds the rest.
"""

from __future__ import annotations

import gzip
import logging
import xml.etree.ElementTree as ET
import zlib
from dataclasses import dataclass

logger = logging.getLogger(__name__)

__all__ = ["SitemapEntries", "parse_sitemap"]

MAX_SITEMAP_URLS = 50_000


@dataclass(frozen=True, slots=True)
class SitemapEntries:
    pages: tuple[str, ...] = ()
    sitemaps: tuple[str, ...] = ()
    """Child sitemaps of a sitemap index."""


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
    for element in root.iter():
        if _local(element.tag) == "loc" and element.text:
            locations.append(element.text.strip())
            if len(locations) >= MAX_SITEMAP_URLS:
                break
    if kind == "sitemapindex":
        return SitemapEntries(sitemaps=tuple(locations))
    if kind == "urlset":
        return SitemapEntries(pages=tuple(locations))
    return SitemapEntries()
