"""The first pass over archives: which URLs they hold, their robots.txt, where each payload lies.

Kept small (a set of URLs and a digest → offset map, no bodies), so the second pass can
resolve ``rel=canonical`` against archived URLs and read a revisit's original again by
offset, and a Ray import can survey files in parallel and merge the findings in order.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from crawl.fetch.decoding import DecodedTooLarge, DecodingFailed
from crawl.fetch.robots import MAX_ROBOTS_BYTES, RobotsPolicy, policy_from_response
from crawl.ingest.archive_records import http_status, read_records
from crawl.run.warc import decoded_payload
from crawl.urls import canonicalize_url

if TYPE_CHECKING:
    from warcio.recordloader import ArcWarcRecord

logger = logging.getLogger(__name__)

__all__ = ["Survey", "origin", "payload_body", "robots_policies", "survey_archives", "survey_file"]


@dataclass(slots=True)
class Survey:
    """The first pass's findings over the archives."""

    urls: set[str] = field(default_factory=set)
    payloads: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Payload digest → (file index, record offset) of a 200 response holding it."""
    robots: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    """Origin → (status, body) of its latest archived robots.txt."""

    def merge(self, other: Survey) -> None:
        """Add a later file's findings: the first payload location and the last robots.txt win."""
        self.urls |= other.urls
        for digest, where in other.payloads.items():
            self.payloads.setdefault(digest, where)
        self.robots.update(other.robots)


def survey_archives(files: list[Path], max_bytes: int) -> Survey:
    """The survey of every file, in order."""
    found = Survey()
    for index, path in enumerate(files):
        found.merge(survey_file(index, path, max_bytes))
    return found


def survey_file(index: int, path: Path, max_bytes: int) -> Survey:
    """One file's findings (``index``: its place in the import's file list)."""
    survey = Survey()

    def note(index: int, offset: int, record: ArcWarcRecord) -> None:
        if record.rec_type != "response":
            return
        status = http_status(record)
        url = canonicalize_url(record.rec_headers.get_header("WARC-Target-URI") or "")
        if status is None or not url:
            return
        if urlsplit(url).path == "/robots.txt":
            body = payload_body(record, max_bytes=MAX_ROBOTS_BYTES, cap_ok=True)
            survey.robots[origin(url)] = (status, body or b"")
            return
        if status != 200:
            return
        survey.urls.add(url)
        digest = record.rec_headers.get_header("WARC-Payload-Digest")
        if digest:
            survey.payloads.setdefault(digest, (index, offset))

    # Unchecked: what a record with a wrong block digest gives is noted before the check
    # anyway, and the second pass checks every block and counts the damage.
    for _ in read_records(path, partial(note, index), lambda _damage: None, check_digests=False):
        pass
    return survey


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def robots_policies(found: dict[str, tuple[int, bytes]]) -> dict[str, RobotsPolicy]:
    now = time.time()
    return {
        origin: policy_from_response(origin, status, body, now=now, ttl_s=1e12, error_ttl_s=1e12)
        for origin, (status, body) in found.items()
    }


def payload_body(record: ArcWarcRecord, *, max_bytes: int, cap_ok: bool = False) -> bytes | None:
    """The record's payload, de-chunked and decoded within ``max_bytes``; None when it fails."""
    headers = record.http_headers
    stream = record.raw_stream
    if headers is not None and "chunked" in (headers.get_header("Transfer-Encoding") or "").lower():
        from warcio.bufferedreaders import ChunkedDataReader

        stream = ChunkedDataReader(stream)
    encoding = (headers.get_header("Content-Encoding") or "") if headers is not None else ""
    try:
        return decoded_payload(stream, encoding, max_bytes)
    except DecodedTooLarge:
        if cap_ok:
            return None
        raise
    except DecodingFailed as exc:
        logger.warning("a payload that does not decode (%s)", exc)
        return None
