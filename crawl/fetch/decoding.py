"""Content-Encoding decoding with a hard cap on the decoded size, for any stack of codings.

httpx decodes as it pleases: a ``br`` body or a stack (``Content-Encoding: gzip, gzip``)
is expanded without an output limit, so a few kilobytes on the wire become gigabytes in
memory (a decompression bomb). Here the fetcher reads the raw bytes and decodes them
itself: every layer produces at most ``_STEP`` bytes per call (zlib's ``max_length``,
brotli's ``output_buffer_limit``), the layers are chained lazily, and the decoded bytes
are counted as they come out of the last layer, so decoding stops at the page cap with
at most a few steps' worth of memory in use, whatever the compression ratio.

Supported codings are the ones advertised in ``ACCEPT_ENCODING``; any other coding is a
``DecodingFailed`` (decoding it as identity would index compressed bytes).
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Protocol

import brotli

__all__ = ["ACCEPT_ENCODING", "BodyDecoder", "DecodedTooLarge", "DecodingFailed"]

ACCEPT_ENCODING = "gzip, deflate, br"
_STEP = 64 * 1024
"""Most bytes one layer hands on per call: the memory one layer may hold at once."""


class DecodingFailed(ValueError):
    """The body is not valid for its declared Content-Encoding, or the coding is unknown."""


class DecodedTooLarge(ValueError):
    """The decoded body grew past the cap. ``head`` holds what the call that crossed it had
    decoded up to the cap, so a caller that keeps a truncated body loses nothing below it."""

    def __init__(self, message: str, head: bytes = b"") -> None:
        super().__init__(message)
        self.head = head


class _Layer(Protocol):
    def feed(self, data: bytes) -> Iterator[bytes]: ...

    def end(self) -> Iterator[bytes]: ...


class _Identity:
    def feed(self, data: bytes) -> Iterator[bytes]:
        if data:
            yield data

    def end(self) -> Iterator[bytes]:
        return iter(())


class _Zlib:
    """gzip (``wbits=16+15``) or deflate (zlib-wrapped, falling back to raw as browsers do)."""

    def __init__(self, *, gzip: bool) -> None:
        self._gzip = gzip
        self._obj = zlib.decompressobj(16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS)
        self._started = False

    def _step(self, data: bytes) -> bytes:
        try:
            out = self._obj.decompress(data, _STEP)
        except zlib.error as exc:
            if self._gzip or self._started:
                raise DecodingFailed(f"invalid {'gzip' if self._gzip else 'deflate'} data: {exc}") from None
            # "deflate" is often sent as a raw stream without the zlib header.
            self._obj = zlib.decompressobj(-zlib.MAX_WBITS)
            try:
                out = self._obj.decompress(data, _STEP)
            except zlib.error as raw_exc:
                raise DecodingFailed(f"invalid deflate data: {raw_exc}") from None
        self._started = True
        return out

    def feed(self, data: bytes) -> Iterator[bytes]:
        pending = data
        while pending:
            out = self._step(pending)
            pending = self._obj.unconsumed_tail
            if out:
                yield out
            elif pending:
                continue
            if self._obj.eof:
                return  # trailing bytes after the stream end are ignored, as browsers do

    def end(self) -> Iterator[bytes]:
        while not self._obj.eof:
            out = self._obj.decompress(b"", _STEP) if self._started else b""
            if not out:
                break
            yield out


class _Brotli:
    def __init__(self) -> None:
        self._obj = brotli.Decompressor()

    def feed(self, data: bytes) -> Iterator[bytes]:
        try:
            out = self._obj.process(data, output_buffer_limit=_STEP)
            while out:
                yield out
                # A full step may leave more output inside; empty input drains it.
                if len(out) < _STEP and self._obj.can_accept_more_data():
                    break
                out = self._obj.process(b"", output_buffer_limit=_STEP)
        except brotli.error as exc:
            raise DecodingFailed(f"invalid br data: {exc}") from None

    def end(self) -> Iterator[bytes]:
        try:
            while not self._obj.is_finished():
                out = self._obj.process(b"", output_buffer_limit=_STEP)
                if not out:
                    break
                yield out
        except brotli.error as exc:
            raise DecodingFailed(f"invalid br data: {exc}") from None


def _layer(coding: str) -> _Layer:
    if coding in ("", "identity"):
        return _Identity()
    if coding in ("gzip", "x-gzip"):
        return _Zlib(gzip=True)
    if coding == "deflate":
        return _Zlib(gzip=False)
    if coding == "br":
        return _Brotli()
    raise DecodingFailed(f"unsupported content-encoding {coding!r}")


class BodyDecoder:
    """Decodes a body chunk by chunk through every layer of its ``Content-Encoding``.

    ``feed`` and ``finish`` return the decoded bytes so far; ``DecodedTooLarge`` is
    raised as soon as the total passes ``max_bytes``, before more is decoded.
    """

    def __init__(self, content_encoding: str, *, max_bytes: int) -> None:
        codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
        # Codings are listed in the order they were applied: undo them last first.
        self._layers = [_layer(c) for c in reversed(codings)]
        self._max_bytes = max_bytes
        self.size = 0

    def _through(self, pieces: Iterator[bytes], index: int) -> Iterator[bytes]:
        if index == len(self._layers):
            yield from pieces
            return
        layer = self._layers[index]
        for piece in pieces:
            yield from self._through(layer.feed(piece), index + 1)

    def _drain(self, index: int) -> Iterator[bytes]:
        """Flush layer ``index`` and everything after it, in order."""
        if index == len(self._layers):
            return
        yield from self._through(self._layers[index].end(), index + 1)
        yield from self._drain(index + 1)

    def _collect(self, pieces: Iterator[bytes]) -> bytes:
        out: list[bytes] = []
        for piece in pieces:
            self.size += len(piece)
            if self.size > self._max_bytes:
                room = len(piece) - (self.size - self._max_bytes)
                out.append(piece[:room])
                raise DecodedTooLarge(f"decoded body passed the {self._max_bytes}-byte cap", b"".join(out))
            out.append(piece)
        return b"".join(out)

    def feed(self, raw: bytes) -> bytes:
        return self._collect(self._through(iter((raw,)), 0))

    def finish(self) -> bytes:
        return self._collect(self._drain(0))
