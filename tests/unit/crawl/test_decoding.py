"""Bounded Content-Encoding decoding: real bombs stop at the cap, honest bodies round-trip."""

from __future__ import annotations

import gzip
import zlib

import brotli
import pytest

from crawl.fetch.decoding import BodyDecoder, DecodedTooLarge, DecodingFailed

CAP = 1 << 20
BOMB = b"\0" * (64 << 20)  # 64 MiB of zeros: ~64 KB gzip, a few hundred bytes br


def _decode(body: bytes, coding: str, *, cap: int = CAP, chunk: int = 4096) -> bytes:
    decoder = BodyDecoder(coding, max_bytes=cap)
    out = [decoder.feed(body[i : i + chunk]) for i in range(0, len(body), chunk)]
    out.append(decoder.finish())
    return b"".join(out)


@pytest.mark.parametrize(
    ("coding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some servers send it
        ("br", brotli.compress),
        ("gzip, br", lambda b: brotli.compress(gzip.compress(b))),
        ("identity", lambda b: b),
        ("", lambda b: b),
    ],
)
def test_honest_bodies_round_trip(coding: str, encode) -> None:  # noqa: ANN001
    body = b"<html><body>" + b"words and more words " * 5000 + b"</body></html>"
    assert _decode(encode(body), coding) == body


@pytest.mark.parametrize(
    ("coding", "wire"),
    [
        ("gzip", gzip.compress(BOMB, 9)),
        ("gzip, gzip", gzip.compress(gzip.compress(BOMB, 9), 9)),
        ("br", brotli.compress(BOMB)),
        ("deflate", zlib.compress(BOMB, 9)),
    ],
)
def test_bombs_stop_at_the_cap(coding: str, wire: bytes) -> None:
    decoder = BodyDecoder(coding, max_bytes=CAP)
    with pytest.raises(DecodedTooLarge):
        for i in range(0, len(wire), 4096):
            decoder.feed(wire[i : i + 4096])
        decoder.finish()
    assert decoder.size <= CAP + 64 * 1024  # stopped within one step of the cap


def test_unknown_or_corrupt_encodings_are_refused() -> None:
    with pytest.raises(DecodingFailed, match="unsupported"):
        BodyDecoder("zstd", max_bytes=CAP)
    with pytest.raises(DecodingFailed):
        _decode(b"not gzip at all", "gzip")
    with pytest.raises(DecodingFailed):
        _decode(b"\xff" * 100, "br")
