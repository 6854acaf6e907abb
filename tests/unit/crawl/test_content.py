"""Content sniffing and charset decoding against mislabelled bodies."""

from __future__ import annotations

import pytest

from crawl.fetch.content import decode_html, is_html_body, parse_content_type


def test_parse_content_type() -> None:
    assert parse_content_type('Text/HTML; Charset="UTF-8"') == ("text/html", "utf-8")
    assert parse_content_type("") == ("", "")


@pytest.mark.parametrize(
    ("media", "body", "expected"),
    [
        ("text/html", b"<!doctype html><p>hi", True),
        ("text/html", b"\x89PNG\r\n\x1a\n\x00\x00", False),
        ("text/html", b"%PDF-1.7 ...", False),
        ("text/html", b"<html>\x00\x01\x02</html>", False),
        ("application/xhtml+xml", b"<?xml version='1.0'?><html/>", True),
        ("image/png", b"<html>", False),
        ("", b"  <!DOCTYPE html><html>", True),
        ("", b"plain words", False),
        ("text/html", "\ufeff<html>".encode("utf-16-le"), True),
    ],
)
def test_is_html_body(media: str, body: bytes, expected: bool) -> None:
    assert is_html_body(media, body) is expected


def test_declared_charset_used_when_it_fits() -> None:
    assert decode_html("Grüße".encode(), "utf-8") == ("Grüße", "utf-8")
    assert decode_html("Привет".encode("koi8-r"), "koi8-r") == ("Привет", "koi8-r")


def test_meta_charset_used_without_header() -> None:
    body = '<meta charset="windows-1251"><p>Привет</p>'.encode("cp1251")
    assert decode_html(body)[0].endswith("<p>Привет</p>")


def test_utf8_declared_but_latin_bytes_falls_back() -> None:
    body = "<p>Le café est très bon, à bientôt</p>".encode("cp1252")
    assert decode_html(body, "utf-8")[0] == "<p>Le café est très bon, à bientôt</p>"


def test_latin1_declared_but_utf8_bytes_is_read_as_utf8() -> None:
    body = "<p>naïve façade</p>".encode()
    assert decode_html(body, "iso-8859-1") == ("<p>naïve façade</p>", "utf-8")


def test_bom_wins_over_declaration() -> None:
    body = b"\xef\xbb\xbf<p>\xc3\xa9</p>"
    assert decode_html(body, "iso-8859-1") == ("<p>é</p>", "utf-8")
