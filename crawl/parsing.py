"""Page parsing off the event loop, in a process pool, with a time budget per page.

Sniffing, decoding and lexbor parsing are CPU work; on the event loop one slow page
freezes every fetch on every host (lexbor is quadratic in nesting depth: 200,000
nested ``<div>`` took 107 s). So a page is handed to a pool of processes sized to the
cores (spawned, so no fork of a loop with open sockets and threads), and bounded twice:

* before lexbor sees it, ``limit_depth`` cuts the document where element nesting
  passes ``max_html_depth`` (a linear scan of the tags), which bounds lexbor's work;
* the parent waits at most ``parse_timeout_s``; a page over it raises ``ParseTimeout``
  (the crawl records it and does not retry), and the pool is rebuilt, because a worker
  stuck in C code cannot be interrupted; the other pages that were in that pool are
  parsed again in the new one.

Submissions are limited to one per worker process, so the budget measures parsing,
not waiting behind other pages.

A small page (at most ``INLINE_MAX_TAGS`` ``<``) is parsed inline instead: its worst
case at any nesting is a few milliseconds, while a trip through the pool costs the
parent as much CPU as parsing it (pickling both ways, ~0.45 ms for a 3 kB page on the
crawl benchmark) plus the worker's own, and the workers themselves (spawned, each
importing the crawler) are only started when a large page first needs one.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import re
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np

from crawl.content import decode_html, is_html_body
from crawl.extract import ParsedPage, parse_html

logger = logging.getLogger(__name__)

__all__ = ["PageJob", "ParsePool", "ParseTimeout", "extract_page", "limit_depth"]

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


def _trie(words: frozenset[str]) -> str:
    """A regex alternation of ``words`` as a trie: sre tries one branch per character
    instead of every word in turn (as ``crawl.extract._BEFORE_BLOCK`` is written by hand)."""
    by_first: dict[str, set[str]] = {}
    for word in words:
        if word:
            by_first.setdefault(word[0], set()).add(word[1:])
    branches = [re.escape(first) + _trie(frozenset(rest)) for first, rest in sorted(by_first.items())]
    if not branches:
        return ""
    if len(branches) == 1 and "" not in words:
        return branches[0]
    return "(?:" + "|".join(branches) + (")?" if "" in words else ")")


_DEPTH_EVENTS = re.compile(
    r"(?ai)<(/(?=[a-z][^<>]*>)|(?!" + _trie(_NO_DEPTH) + r"(?![a-z0-9:-]))[a-z](?=[^<>]*(?<!/)>))"
)
"""The tags ``_TAG`` matches that move the depth: a closing tag captures ``/``, an opening tag
that nests (not void, not implicitly closed, not self-closed) its first letter, the rest
of the tag checked by lookahead (greedy: ``[^<>]*`` stops at the tag's one ``>``);
``findall`` then yields one character per step without a Python loop. ASCII-only case
folding, as ``name.lower()`` on ``_TAG``'s ASCII names."""


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
    stripped = _SKIP.sub("", html)
    if _deepest(stripped) <= max_depth:
        return html
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


def _deepest(stripped: str) -> int:
    """The deepest nesting :func:`limit_depth`'s walk reaches, computed in numpy.

    The walk (a nesting opening tag adds a level, a closing tag takes one off but never
    goes below zero) is a running sum floored at zero: at each step the plain running sum
    minus the lowest it has been so far (or zero). On the 149 Python-docs pages past the
    cheap bound (229 kB, ~10,000 tags on average) ``limit_depth`` cost 6.5 ms a page with
    the walk in Python, more than parsing the page, and 2.8 ms with this (0.6 of it
    ``_SKIP``). Only a page that passes the bound walks again, in Python, to find the cut.
    """
    steps = "".join(_DEPTH_EVENTS.findall(stripped)).encode("ascii")
    if not steps:
        return 0
    moves = np.frombuffer(steps, dtype=np.uint8) != ord("/")
    running = np.cumsum(moves.astype(np.int64) * 2 - 1)
    lowest = np.minimum(np.minimum.accumulate(running), 0)
    return int((running - lowest).max())


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


def extract_page(job: PageJob) -> ParsedPage | None:
    """Sniff, decode, bound the depth and parse; None when the body is not HTML."""
    if not is_html_body(job.media_type, job.body, job.charset):
        return None
    html, _ = decode_html(job.body, job.charset)
    html = limit_depth(html, job.max_depth)
    return parse_html(html, job.url, x_robots_tag=job.x_robots_tag, max_links=job.max_links)


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
        return ProcessPoolExecutor(max_workers=self.workers, mp_context=self._context)

    async def extract(self, job: PageJob) -> ParsedPage | None:
        """Parse in a worker process (small pages inline); raises ``ParseTimeout`` past the budget."""
        if job.body.count(b"<") <= INLINE_MAX_TAGS:
            return extract_page(job)
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        loop = asyncio.get_running_loop()
        async with self._slots:
            for attempt in range(2):
                pool = self._pool
                future = loop.run_in_executor(pool, extract_page, job)
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
