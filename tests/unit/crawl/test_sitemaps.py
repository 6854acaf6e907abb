"""Sitemap parsing: urlset, sitemap index, gzip, garbage."""

from __future__ import annotations

import gzip

from crawl.extraction.sitemaps import SitemapEntries, parse_sitemap

URLSET = b"""<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc> https://a.com/one </loc><lastmod>2024-01-01</lastmod></url>
  <url><loc>https://a.com/two</loc></url>
</urlset>"""
INDEX = b"""<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <sitemap><loc>https://a.com/s1.xml</loc></sitemap></sitemapindex>"""


def test_urlset_and_index() -> None:
    assert parse_sitemap(URLSET) == SitemapEntries(pages=("https://a.com/one", "https://a.com/two"))
    assert parse_sitemap(INDEX) == SitemapEntries(sitemaps=("https://a.com/s1.xml",))


def test_gzipped_and_malformed() -> None:
    assert parse_sitemap(gzip.compress(URLSET)).pages == ("https://a.com/one", "https://a.com/two")
    assert parse_sitemap(b"<urlset><url><loc>x") == SitemapEntries()
    assert parse_sitemap(b"\x1f\x8bnot gzip") == SitemapEntries()
    assert parse_sitemap(b"<html><loc>https://a.com/</loc></html>") == SitemapEntries()
