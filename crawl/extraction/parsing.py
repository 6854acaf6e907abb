"""Page parsing off the event loop, in a process pool, with a time budget per page.

Sniffing, decoding and lexbor parsing are CPU work; on the event loop one slow page
freezes every fetch on every host (lexbor is quadratic in nesting depth; DECISIONS 23).
So a page goes to a pool of spawned processes sized to the cores, and is bounded twice:

* before lexbor sees it, ``limit_depth`` cuts the document where element nesting
  passes ``max_html_depth`` (a linear scan of the tags), which bounds lexbor's work;
* the parent waits at most ``parse_timeout_s``; a page over it raises ``ParseTimeout``
  (recorded, not retried) and the pool is rebuilt, because a worker stuck in C code cannot
  be interrupted; the other pages in that pool are parsed again in the new one.

One submission per worker process, so the budget measures parsing, not waiting. A small
page (at most ``INLINE_MAX_TAGS`` ``<``) is parsed inline, as cheap as the pool trip.
Workers start when a large page first needs one, and die with the crawl (``die_with_parent``).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from crawl.extraction.page import ParsedPage, parse_html
from crawl.fetch.content import decode_html, is_html_body

logger = logging.getLogger(__name__)

__all__ = ["PageJob", "ParsePool", "ParseTimeout", "die_with_parent", "extract_page", "limit_depth"]

_SKIP = re.compile(r"<!--.*?(?:-->|\Z)|<(script|style|xmp|plaintext)\b.*?(?:</\1\s*>|\Z)", re.S | re.I)
"""Comments and raw-text elements: what looks like tags in them is not."""
_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9:-]*)[^<>]*?(/?)>")
_NO_DEPTH = frozenset(
    {
        # void elements: never hold children
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr", "param", "keygen", "frame",
        # closed implicitly by their next sibling, so an unclosed run does not nest
        "p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup", "rb", "rp", "rt", "rtc",
        "thead", "tbody", "tfoot", "colgroup", "caption",
    }
)  # fmt: skip
_ALWAYS_CHEAP_TAGS = 4096
"""A page with at most this many ``<`` costs lexbor little at any depth (~50 ms at worst)."""
INLINE_MAX_TAGS = 1024
"""Pages with at most this many ``<`` parse on the event loop (quadratic worst case: ~3 ms)."""
_T = TypeVar("_T")


def limit_depth(html: str, max_depth: int) -> str:
    """``html`` cut where element nesting first passes ``max_depth`` (unchanged otherwise).

    An approximation of the tree builder that errs towards deeper: comments and
    raw-text elements are skipped, void and implicitly closed elements do not nest.
    Self-closed tags do not count either, although ``<div/>`` nests in HTML: counting
    them would add a level for every ``<path/>`` of a page's SVG icons; the parse budget
    still bounds a page built of ``<div/>``. A cut document also loses its comments,
    scripts and styles (extraction drops them anyway).
    """
    if html.count("<") <= max(_ALWAYS_CHEAP_TAGS, max_depth):
        return html
    if _deepest(_stripped_utf8(html)) <= max_depth:
        return html
    stripped = _SKIP.sub("", html)
    depth = 0
    for match in _TAG.finditer(stripped):
        closing, name, self_closing = match.groups()
        if closing:
            if depth:
                depth -= 1
        elif not self_closing and name.lower() not in _NO_DEPTH:
            depth += 1
            if depth > max_depth:
                logger.debug("HTML nested deeper than %d: cut at character %d", max_depth, match.start())
                return stripped[: match.start()]
    return html


_PAD = 16
"""Zero bytes after a page's UTF-8 bytes, so the bytes after any ``<`` can be read unchecked."""
_LANES = 0x0101010101010101
"""One in every byte of a ``uint64``: ``c * _LANES`` is byte ``c`` eight times."""
_HIGH = np.uint64(0x80 * _LANES)
_FOLD = np.uint64(0x20 * _LANES)
"""``| _FOLD`` lowers the eight ASCII letters of a ``uint64`` (and leaves digits, ``:`` and ``-``)."""
_FIRST_BYTES = np.array([(1 << 8 * n) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
"""``_FIRST_BYTES[n]`` keeps the first ``n`` bytes (little-endian) of a ``uint64``."""
_RAW_TEXT_NAMES = (b"script", b"style", b"xmp")
"""Raw-text elements whose name fits in 8 bytes; ``plaintext`` is read on its own."""
_WORD_BYTE = np.array([chr(b).isalnum() or b == ord("_") for b in range(128)] + [False] * 128)
"""ASCII word characters (``\\w``); a non-ASCII byte is decided on the string instead."""
_NAME_BYTE = np.array([chr(b).isalnum() or chr(b) in ":-" for b in range(128)] + [False] * 128)
"""Bytes of a tag name as ``_TAG`` reads one: ASCII letters, digits, ``:`` and ``-``."""


def _key(name: bytes) -> int:
    """Up to 8 bytes as the little-endian ``uint64`` that ``_words`` reads them as."""
    return int.from_bytes(name, "little")


_NO_DEPTH_KEYS = np.array(sorted(_key(name.encode("ascii")) for name in _NO_DEPTH), dtype=np.uint64)


def _words(padded: np.ndarray) -> np.ndarray:
    """``_words(padded)[i]``: bytes ``i`` to ``i + 7`` as one little-endian ``uint64`` (a view, no copy).

    Reading eight bytes after each ``<`` is then one gather of a 1-D array, where a
    2-D window of bytes costs ~5× as much per byte in numpy."""
    return np.ndarray(shape=(len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))


def _at_least(lanes: np.ndarray, low: int) -> np.ndarray:
    """Bit 7 of each byte set where that byte (bit 7 cleared first) is at least ``low``:
    ``0x80 - low`` added to 7 bits never carries into the next byte."""
    lifted: np.ndarray = ((lanes & ~_HIGH) + np.uint64((0x80 - low) * _LANES)) & _HIGH
    return lifted


def _name_bytes(lanes: np.ndarray) -> np.ndarray:
    """Bit 7 of each byte set where that byte can be in a tag name (``_NAME_BYTE``), eight at a time."""
    folded = lanes | _FOLD
    letters = _at_least(folded, ord("a")) & ~_at_least(folded, ord("z") + 1)
    digits_colon = _at_least(lanes, ord("0")) & ~_at_least(lanes, ord(":") + 1)
    dash = _at_least(lanes, ord("-")) & ~_at_least(lanes, ord("-") + 1)
    named: np.ndarray = (letters | digits_colon | dash) & ~lanes
    return named


def _stripped_utf8(html: str) -> np.ndarray:
    """``_SKIP.sub("", html)`` as UTF-8 bytes followed by ``_PAD`` zeros.

    ``_SKIP`` scanned a large page's every ``<`` in sre (0.9 ms on the 229 kB Python-docs
    pages, for ten matches). Here numpy finds the few places where it can match (``<!--``,
    or a raw-text name and a non-word byte, read on the bytes; any ``<`` followed by a
    non-ASCII byte too, where Unicode case folding or ``\\b`` might differ), and
    ``_SKIP.match`` runs there, in document order, on the string: the same matches.
    """
    data = html.encode("utf-8", "surrogatepass")
    padded = np.frombuffer(data + bytes(_PAD), dtype=np.uint8)
    starts = _may_start_skip(padded, np.flatnonzero(padded[: len(data)] == ord("<")))
    if not starts.size:
        return padded
    continuation = (padded & 0xC0) == 0x80  # UTF-8 bytes that start no character
    pieces: list[bytes] = []
    kept_from = 0  # bytes
    resume = 0  # characters: where the scan goes on after a match
    counted_to, continued = 0, 0  # continuation bytes before ``counted_to``
    for start in starts.tolist():
        continued += int(np.count_nonzero(continuation[counted_to:start]))
        counted_to = start
        position = start - continued
        if position < resume:
            continue
        match = _SKIP.match(html, position)
        if match is None:
            continue
        resume = match.end()
        pieces.append(data[kept_from:start])
        kept_from = start + len(html[position:resume].encode("utf-8", "surrogatepass"))
    pieces.append(data[kept_from:])
    pieces.append(bytes(_PAD))
    return np.frombuffer(b"".join(pieces), dtype=np.uint8)


def _may_start_skip(padded: np.ndarray, opens: np.ndarray) -> np.ndarray:
    """The ``<`` of ``opens`` where ``_SKIP`` may match: every one it matches at, and a few more.

    Only ``!``, a letter that folds to ``s``, ``x`` or ``p`` (``| 0x20``) or a non-ASCII
    byte (``ſ`` folds to ``s`` in Unicode) can follow a ``<`` it matches at."""
    first = padded[opens + 1] | 0x20
    starts = (first == ord("s")) | (first == ord("x")) | (first == ord("p"))
    opens = opens[starts | (first >= 0x80) | (first == ord("!"))]
    words = _words(padded)
    head, tail = words[opens + 1], words[opens + 3]  # bytes 1-8 and 3-10 after the "<"
    may = ((head | tail) & _HIGH) != 0
    may |= (head & _FIRST_BYTES[3]) == _key(b"!--")
    folded = head | _FOLD
    for name in _RAW_TEXT_NAMES:
        after = padded[opens + 1 + len(name)]
        may |= ((folded & _FIRST_BYTES[len(name)]) == _key(name)) & ~_WORD_BYTE[after]
    ends = padded[opens + 9] | 0x20
    may |= (folded == _key(b"plaintex")) & (ends == ord("t")) & ~_WORD_BYTE[padded[opens + 10]]
    chosen: np.ndarray = opens[may]
    return chosen


def _deepest(padded: np.ndarray) -> int:
    """The deepest nesting :func:`limit_depth`'s walk reaches on these bytes (``_PAD`` zeros last).

    The tags that move the depth are read with numpy: a ``<`` whose next ``<`` or ``>``
    is a ``>`` ends a tag there, as ``_TAG``'s ``[^<>]*?>`` reads it; it closes one when
    ``/`` and a letter follow the ``<``, and opens a nesting one when a letter follows,
    the byte before the ``>`` is not ``/`` and the name is not one of ``_NO_DEPTH``. The
    walk (a nesting opening tag adds a level, a closing tag takes one off but never goes
    below zero) is a running sum floored at zero: at each step the plain running sum
    minus the lowest it has been so far (or zero). On the 149 Python-docs pages past the
    cheap bound (229 kB, ~10,000 tags on average) ``limit_depth`` cost 6.5 ms a page with
    the walk in Python, 2.8 ms with ``findall`` over a regex yielding a character per tag,
    and ~1.1 ms (this function ~0.5 of it) with the tags read in numpy. Only a page that
    passes the bound walks again, in Python, to find the cut.
    """
    size = len(padded) - _PAD
    marks = np.flatnonzero((padded[:size] == ord("<")) | (padded[:size] == ord(">")))
    kinds = padded[marks]
    tags = np.flatnonzero((kinds[:-1] == ord("<")) & (kinds[1:] == ord(">")))
    opens, ends = marks[tags], marks[tags + 1]
    if not opens.size:
        return 0
    first, second = padded[opens + 1], padded[opens + 2]
    closing = (first == ord("/")) & _NAME_BYTE[second] & (second >= ord("A"))
    nesting = _NAME_BYTE[first] & (first >= ord("A")) & (padded[ends - 1] != ord("/"))
    nesting[nesting] = ~_no_depth_name(padded, opens[nesting])
    running = np.cumsum(nesting.astype(np.int64) - closing)
    lowest = np.minimum(np.minimum.accumulate(running), 0)
    return int((running - lowest).max())


def _no_depth_name(padded: np.ndarray, opens: np.ndarray) -> np.ndarray:
    """Whether the tag name after each ``<`` of ``opens`` is one of ``_NO_DEPTH`` (any case).

    The name is the run of ``_NAME_BYTE`` after the ``<``: its first eight bytes are read
    as one ``uint64``, the bytes from the first that is not a name byte on are masked off
    (the lowest set bit of the non-name bits marks it), and the key is looked up among
    ``_NO_DEPTH_KEYS``; a name of eight bytes counts only when the ninth ends it."""
    head = _words(padded)[opens + 1]
    others = ~_name_bytes(head) & _HIGH
    lowest = others & (~others + np.uint64(1))  # 0 when all eight are name bytes
    kept = (lowest >> np.uint64(7)) - np.uint64(1)  # the bytes before it; all when 0
    keys = (head | _FOLD) & kept
    slots = np.minimum(np.searchsorted(_NO_DEPTH_KEYS, keys), len(_NO_DEPTH_KEYS) - 1)
    found: np.ndarray = (_NO_DEPTH_KEYS[slots] == keys) & ((lowest != 0) | ~_NAME_BYTE[padded[opens + 9]])
    return found


@dataclass(frozen=True, slots=True)
class PageJob:
    """What parsing one response needs; small and picklable, for the worker process."""

    body: bytes
    media_type: str
    charset: str
    url: str
    x_robots_tag: str
    max_links: int
    max_depth: int
    content_language: str = ""
    """The Content-Language response header (a page's own ``lang`` comes first)."""


def extract_page(job: PageJob) -> ParsedPage | None:
    """Sniff, decode, bound the depth and parse; None when the body is not HTML."""
    if not is_html_body(job.media_type, job.body, job.charset):
        return None
    html, _ = decode_html(job.body, job.charset)
    html = limit_depth(html, job.max_depth)
    return parse_html(
        html,
        job.url,
        x_robots_tag=job.x_robots_tag,
        content_language=job.content_language,
        max_links=job.max_links,
    )


_PR_SET_PDEATHSIG = 1
_WATCH_PARENT_S = 1.0


def die_with_parent(parent: int) -> None:
    """In a pool worker, first thing: die when the process that started it dies, however it dies.

    A SIGKILLed crawl runs no clean-up, and a worker waiting on its task queue never sees
    the end of it (it holds that queue's write end itself), so it would live on under init
    with the resource tracker it keeps open. On Linux the parent-death signal kills it at
    once (``prctl(PR_SET_PDEATHSIG)``; it follows the thread that started the worker: the
    pool grows on the crawl's event loop, which outlives it); elsewhere a thread polls
    for a new parent.
    """
    if sys.platform.startswith("linux"):
        try:
            armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
        if armed:
            if os.getppid() != parent:  # the parent died before the signal was armed
                os._exit(1)
            return
    threading.Thread(target=_watch_parent, args=(parent,), name="parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(_WATCH_PARENT_S)
    os._exit(1)


class ParseTimeout(Exception):
    """A page took longer than the parse budget."""


class ParsePool:
    """A spawned process pool for ``extract_page``, rebuilt when a page overruns its budget."""

    def __init__(self, workers: int = 0, *, timeout_s: float = 10.0) -> None:
        self.workers = workers or os.cpu_count() or 1
        self.timeout_s = timeout_s
        self._context = multiprocessing.get_context("spawn")
        self._pool = self._new_pool()  # processes start on the first submission
        self._slots: asyncio.Semaphore | None = None

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=self._context,
            initializer=die_with_parent,
            initargs=(os.getpid(),),
        )

    def start(self) -> None:
        """Spawn the workers now (else the first large pages wait for them), e.g. while an import
        surveys its archives: each submission of a no-op while none is idle spawns one."""
        for _ in range(self.workers):
            self._pool.submit(int)

    async def extract(self, job: PageJob) -> ParsedPage | None:
        """Parse in a worker process (small pages inline); raises ``ParseTimeout`` past the budget."""
        return await self.run(extract_page, job)

    async def run(self, work: Callable[[PageJob], _T], job: PageJob) -> _T:
        """``work(job)`` as :meth:`extract` runs ``extract_page``: a caller that needs more than the
        parse per page (``work`` a module-level function) gets it done in the worker as well."""
        if job.body.count(b"<") <= INLINE_MAX_TAGS:
            return work(job)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        loop = asyncio.get_running_loop()
        async with self._slots:
            for attempt in range(2):
                pool = self._pool
                future = loop.run_in_executor(pool, work, job)
                try:
                    return await asyncio.wait_for(future, self.timeout_s)
                except TimeoutError:
                    self._rebuild(pool)
                    raise ParseTimeout(f"{job.url} took over {self.timeout_s:g} s to parse") from None
                except BrokenProcessPool:
                    # Another page's overrun (or a crashed worker) took the pool down.
                    self._rebuild(pool)
                    if attempt:
                        raise
        raise AssertionError("unreachable")

    def _rebuild(self, pool: ProcessPoolExecutor) -> None:
        if self._pool is not pool:
            return  # already rebuilt by another page
        logger.warning("Rebuilding the parse pool after a page overran its budget or a worker died")
        self._pool = self._new_pool()
        processes = list(getattr(pool, "_processes", {}).values())
        for process in processes:
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        pool = self._pool
        pool.shutdown(wait=True, cancel_futures=True)
