"""Content-type sniffing and charset detection: trust headers only as far as the bytes agree.

Servers mislabel: images and archives go out as ``text/html``, Latin-1 pages declare
UTF-8 and the reverse. Parsing a PNG as HTML fills the index with garbage; decoding
with the wrong charset turns every accent into mojibake. The rules follow the WHATWG
MIME sniffing "binary data bytes" check and the browsers' order for encodings
(BOM, then HTTP header, then ``<meta charset>``), checked against the bytes.
"""

from __future__ import annotations

import codecs
import re

__all__ = ["decode_html", "is_html_body", "parse_content_type"]

_BINARY_SIGNATURES = (
    b"\x89PNG",
    b"GIF8",
    b"\xff\xd8\xff",
    b"%PDF-",
    b"PK\x03\x04",
    b"\x1f\x8b",
    b"BZh",
    b"\xfd7zXZ",
    b"7z\xbc\xaf",
    b"Rar!",
    b"RIFF",
    b"OggS",
    b"ID3",
    b"\x00\x00\x01\x00",
    b"wOFF",
    b"wOF2",
    b"\x7fELF",
)
_BINARY_BYTE = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_\-:.]+)""", re.IGNORECASE)
_META_PRESCAN_BYTES = 16 * 1024
"""Where ``<meta charset>`` is looked for: pages with long heads put it past 1 KiB."""
_SINGLE_BYTE = frozenset({"latin_1", "iso8859-1", "cp1252", "ascii", "iso8859-15"})
_LATIN_FAMILY = frozenset(
    {
        "cp1250",
        "cp1252",
        "cp1254",
        "cp1257",
        "latin_1",
        "iso8859-1",
        "iso8859-2",
        "iso8859-3",
        "iso8859-4",
        "iso8859-9",
        "iso8859-10",
        "iso8859-13",
        "iso8859-14",
        "iso8859-15",
        "iso8859-16",
        "mac-roman",
        "mac-latin2",
    }
)


def parse_content_type(header: str) -> tuple[str, str]:
    """``("text/html", "utf-8")`` from ``"text/html; charset=UTF-8"``; missing parts are ``""``."""
    media, _, params = header.partition(";")
    charset = ""
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip("\"'").lower()
    return media.strip().lower(), charset


_SNIFF_BYTES = 512 * 1024
"""Bytes of a body the binary check reads: a text prefix must not hide a binary tail."""
_CONTROL_BYTES = bytes(b for b in range(32) if _BINARY_BYTE.match(bytes([b])))
_WIDE_CHARSETS = ("utf-16", "utf_16", "utf-32", "utf_32")


def _is_wide(charset: str) -> bool:
    return charset.lower().startswith(_WIDE_CHARSETS)


def _looks_binary(body: bytes, charset: str = "") -> bool:
    """Binary by signature, or by control bytes over the first ``_SNIFF_BYTES``.

    One stray control byte (a NUL in a title) does not make a page binary: more than one
    byte in a hundred does, and so do more than a handful at over one in a thousand.
    UTF-16/32 text is full of NULs, so a wide declared charset that the bytes bear out
    skips the control-byte count.
    """
    if body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF8)):
        return False
    if body.startswith(_BINARY_SIGNATURES):
        return True
    sample = body[:_SNIFF_BYTES]
    if _is_wide(charset) and b"\x00" in sample:
        return False
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return controls * 100 > len(sample) or (controls > 4 and controls * 1000 > len(sample))


def is_html_body(media_type: str, body: bytes, charset: str = "") -> bool:
    """True when the response should be parsed as HTML.

    A declared HTML type whose bytes are binary is not HTML; a missing type is
    sniffed from the bytes (``<html``, ``<!doctype html`` and friends).
    """
    if media_type in _HTML_TYPES:
        return not _looks_binary(body, charset)
    if media_type:
        return False
    head = body[:1024].lstrip().lower()
    return head.startswith(
        (b"<!doctype html", b"<html", b"<head", b"<body", b"<title", b"<p", b"<div")
    ) and not _looks_binary(body, charset)


def _codec_name(label: str) -> str:
    try:
        return codecs.lookup(label).name
    except LookupError:
        return ""


def decode_html(body: bytes, declared_charset: str = "") -> tuple[str, str]:
    """Decode an HTML body; returns ``(text, codec_name)``.

    Order: byte-order mark; the declared charset (HTTP header, else ``<meta>``) when
    the bytes decode cleanly with it; charset detection otherwise. A single-byte
    declaration on bytes that are valid multi-byte UTF-8 is overruled in favour of
    UTF-8, the commonest mislabel on the web. A UTF-16/32 label on bytes without a
    single NUL is ignored: such text cannot be wide.
    """
    text, name = _decode(body, declared_charset)
    # A NUL is never content (the HTML parser would make it U+FFFD); drop it here.
    return (text.replace("\x00", "") if "\x00" in text else text), name


def _decode(body: bytes, declared_charset: str) -> tuple[str, str]:
    for bom, name in (
        (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
    ):
        if body.startswith(bom):
            return body[len(bom) :].decode(name, errors="replace"), name
    declared = _codec_name(declared_charset) if declared_charset else ""
    if not declared:
        match = _META_CHARSET.search(body[:_META_PRESCAN_BYTES])
        declared = _codec_name(match.group(1).decode("ascii", "ignore")) if match else ""
    if _is_wide(declared) and b"\x00" not in body[:_SNIFF_BYTES]:
        declared = ""  # UTF-16/32 text of any script has NULs; ASCII-range bytes are not it
    if declared in _SINGLE_BYTE and not body.isascii():
        try:
            return body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    if declared:
        try:
            return body.decode(declared), declared
        except (UnicodeDecodeError, LookupError):
            pass
    if body.isascii():
        return body.decode("ascii"), "ascii"
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    import charset_normalizer  # only here: 2.7 MB of a crawl worker's RSS for pages that need it

    best = charset_normalizer.from_bytes(body[:65536]).best()
    name = _codec_name(best.encoding) if best is not None else ""
    if not name or name in _LATIN_FAMILY:
        # Detectors cannot tell the Latin single-byte code pages apart on short text
        # ("très" reads as "trčs" in cp1250); windows-1252 is the web's own fallback.
        name = "cp1252"
    return body.decode(name, errors="replace"), name
