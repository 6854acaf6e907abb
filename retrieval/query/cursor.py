"""Opaque deep-paging cursors pinned to a generation, signed so that only this service mints them.

A cursor carries a generation *view* (the generation id plus the mark of the in-place
update it was opened at, ``Generation.view``, so an update does not switch the list under
it; DECISIONS 38), the query, its filters, the ranker and the offset reached. A
generation's ranked list is deterministic (``SearchService.ranked``), so following cursors
gives every result once, with no gaps, even when a new generation is published meanwhile.

A token is ``payload.mac``: the JSON payload and its HMAC-SHA256, both base64url. The key
is derived from the deployment's secret (``search.cursor_key``, else a random key created
once under the index root) and the cursor's generation, so a cursor is honoured only while
its generation is served, and none verifies under another. After the MAC, the payload is
checked again against the caps (size, depth): a key leak or a change of settings cannot
turn a cursor into a way around them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import atomic
from core.errors import BadParameter, ConfigError
from core.settings import SearchSettings
from retrieval.index.layout import cursor_key_file, store_root

MAX_CURSOR_CHARS = 8192
KEY_BYTES = 32
START_AGAIN = "use the next_cursor value of a previous response, or start the search again"


@dataclass(frozen=True, slots=True)
class Cursor:
    generation: str
    query: str
    ranker: str
    offset: int
    size: int
    site: str | None = None
    lang: str | None = None
    filetype: str | None = None
    """The filter parameters the first page was asked with (a filter written in the query
    text travels in ``query``): a cursor continues the list they selected, never another."""
    read_as: str = ""
    """The language the first page read the query in (``Query.read_as``): kept, so the list a
    cursor continues is read the same whatever the next request's ``Accept-Language``."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _bounded_int(data: dict[str, Any], name: str, low: int, high: int, what: str) -> int:
    value = data.get(name)
    if type(value) is not int:  # JSON floats (1e308, Infinity) and booleans are not offsets
        raise BadParameter(f"The cursor is not valid ({what} is not a whole number); {START_AGAIN}.")
    if not low <= value <= high:
        raise BadParameter(f"The cursor's {what} {value} is out of range ({low} to {high}); {START_AGAIN}.")
    return value


def load_or_create_key(index: Path) -> bytes:
    """The deployment's cursor secret under the index root, created on first use.

    Created with a link from a finished temporary file, which fails when the file
    exists: processes starting together all end up with the first one's key.
    """
    path = cursor_key_file(store_root(index))
    if not path.exists():
        tmp = atomic.temp_sibling(path)
        try:
            tmp.write_text(secrets.token_hex(KEY_BYTES) + "\n")
            tmp.chmod(0o600)
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass
        except OSError as exc:
            raise ConfigError(
                f"Cannot create the cursor key {path}: {exc}; set TRAWL_SEARCH__CURSOR_KEY instead."
            ) from exc
        finally:
            tmp.unlink(missing_ok=True)
    return bytes.fromhex(path.read_text().strip())


class CursorCodec:
    """Signs cursors and checks what comes back: the MAC, then every field against the caps."""

    def __init__(self, secret: bytes, *, max_size: int, max_depth: int) -> None:
        self._secret = secret
        self.max_size = max_size
        self.max_depth = max_depth

    @classmethod
    def for_index(cls, index: Path, settings: SearchSettings) -> CursorCodec:
        configured = settings.cursor_key
        secret = configured.get_secret_value().encode() if configured else load_or_create_key(index)
        return cls(secret, max_size=settings.max_page_size, max_depth=settings.max_cursor_depth)

    def _mac(self, generation: str, payload: bytes) -> bytes:
        key = hmac.new(self._secret, b"trawl-cursor/" + generation.encode(), hashlib.sha256).digest()
        return hmac.new(key, payload, hashlib.sha256).digest()

    def encode(self, cursor: Cursor) -> str:
        payload = json.dumps(
            {
                "g": cursor.generation,
                "q": cursor.query,
                "r": cursor.ranker,
                "o": cursor.offset,
                "s": cursor.size,
                "f": [cursor.site, cursor.lang, cursor.filetype],
                **({"l": cursor.read_as} if cursor.read_as else {}),
            },
            separators=(",", ":"),
        ).encode()
        return f"{_b64(payload)}.{_b64(self._mac(cursor.generation, payload))}"

    def decode(self, token: str) -> Cursor:
        """The cursor in ``token``; a BadParameter (HTTP 400) saying what is wrong otherwise."""
        if len(token) > MAX_CURSOR_CHARS:
            raise BadParameter(f"The cursor is too long; {START_AGAIN}.")
        try:
            payload_text, mac_text = token.split(".")
            payload, mac = _unb64(payload_text), _unb64(mac_text)
            data = json.loads(payload)
            generation = data["g"]
        except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            raise BadParameter(f"The cursor is not valid; {START_AGAIN}.") from exc
        if not isinstance(generation, str) or not hmac.compare_digest(mac, self._mac(generation, payload)):
            raise BadParameter(f"The cursor was not made by this service or was altered; {START_AGAIN}.")
        if not isinstance(data.get("q"), str) or not isinstance(data.get("r"), str):
            raise BadParameter(f"The cursor is not valid; {START_AGAIN}.")
        size = _bounded_int(data, "s", 1, self.max_size, "page size")
        offset = _bounded_int(data, "o", size, max(size, self.max_depth - size), "depth")
        if offset % size:
            raise BadParameter(f"The cursor's depth {offset} is not a whole number of pages; {START_AGAIN}.")
        filters = data.get("f", [None, None, None])
        if (
            not isinstance(filters, list)
            or len(filters) != 3
            or any(f is not None and not isinstance(f, str) for f in filters)
        ):
            raise BadParameter(f"The cursor is not valid; {START_AGAIN}.")
        read_as = data.get("l", "")
        if not isinstance(read_as, str) or len(read_as) > 8 or (read_as and not read_as.isalpha()):
            raise BadParameter(f"The cursor is not valid; {START_AGAIN}.")
        site, lang, filetype = filters
        return Cursor(generation, data["q"], data["r"], offset, size, site, lang, filetype, read_as)
