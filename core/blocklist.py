"""Operator block lists: hosts and URL patterns that are neither crawled nor served.

One JSON file in the crawl directory (``CrawlDir.blocklist``), replaced atomically and
re-read when its modification time changes, so every crawl worker (on its next lease),
``trawl block``, the admin API and ``trawl inspect`` read the same rules and reasons. A host
rule matches the host and its subdomains; a pattern rule is a shell-style glob over the
whole canonical URL (``http://example.com/private/*``).

Blocking also takes out what is already indexed: :func:`block` writes a removal
(``core.deletions``) for every stored document the rule matches, so those pages leave
search within the incremental indexer's lag. Unblocking does not bring them back; the next
fetch of a page does (a removal hides only versions fetched before it).

Example: ``BlockList(CrawlDir(data).blocklist).add("host", "spam.example", reason="link farm")``
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from core.atomic import write_text
from core.crawldir import CrawlDir
from core.deletions import DeletionLog, Removal
from core.docstore import DocStore
from core.errors import ConfigError

__all__ = ["OPERATOR", "BlockList", "BlockRule", "block", "rule_kind"]

OPERATOR = "operator"
"""The removal log's folder for operator blocks (never a crawl worker's name)."""

RuleKind = Literal["host", "pattern"]


@dataclass(frozen=True, slots=True)
class BlockRule:
    kind: RuleKind
    value: str
    reason: str
    added_at: float

    def describe(self) -> str:
        """The reason as the crawl records it for a blocked URL (``trawl inspect`` shows it)."""
        return f"blocked by the operator ({self.kind} {self.value}): {self.reason}"

    def matches(self, url: str) -> bool:
        if self.kind == "pattern":
            return fnmatchcase(url, self.value)
        try:
            host = (urlsplit(url).hostname or "").lower()
        except ValueError:
            return False
        return host == self.value or host.endswith("." + self.value)


class BlockList:
    """The rules in one file; cheap to ask often (re-read only when the file changed).

    The file is looked at (one ``stat``) at most every ``check_interval_s``: a crawl asks
    for every URL it fetches, and a ``stat`` per page was 0.7% of a crawl worker's CPU. A
    rule another process adds therefore takes effect within that interval; this object's
    own ``add`` and ``remove`` take effect at once.
    """

    def __init__(self, path: Path, *, check_interval_s: float = 1.0) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._rules: tuple[BlockRule, ...] = ()
        self._check_interval_s = check_interval_s
        self._checked_at = -float("inf")

    def rules(self) -> tuple[BlockRule, ...]:
        now = time.monotonic()
        if now - self._checked_at < self._check_interval_s:
            return self._rules
        self._checked_at = now
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._rules = None, ()
            return ()
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp != self._stamp:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            self._rules = tuple(BlockRule(**rule) for rule in raw.get("rules", []))
            self._stamp = stamp
        return self._rules

    def _current_rules(self) -> tuple[BlockRule, ...]:
        """The file's rules as they are now: an edit must not write back a stale copy and
        drop a rule another process added within the interval."""
        self._checked_at = -float("inf")
        return self.rules()

    def match(self, url: str) -> BlockRule | None:
        """The first rule blocking ``url``, or None."""
        return next((rule for rule in self.rules() if rule.matches(url)), None)

    def add(self, kind: RuleKind, value: str, *, reason: str) -> BlockRule:
        value = value.strip()
        if kind not in ("host", "pattern") or not value:
            raise ConfigError(f"A block rule is a host or a URL pattern, not {kind}:{value!r}.")
        if kind == "host":
            value = value.lower().strip(".")
        rule = BlockRule(kind, value, reason, time.time())
        kept = [r for r in self._current_rules() if (r.kind, r.value) != (kind, value)]
        self._write([*kept, rule])
        return rule

    def remove(self, value: str) -> bool:
        """Drop every rule with this value; True when one was there."""
        rules = self._current_rules()
        kept = [r for r in rules if r.value not in (value, value.lower().strip("."))]
        if len(kept) == len(rules):
            return False
        self._write(kept)
        return True

    def _write(self, rules: list[BlockRule]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text(self.path, json.dumps({"rules": [asdict(r) for r in rules]}, indent=1))
        self._stamp, self._checked_at = None, -float("inf")


def rule_kind(value: str) -> RuleKind:
    """``spam.example`` is a host; anything with a scheme or a glob character is a pattern."""
    return "pattern" if "://" in value or any(c in value for c in "*?[") else "host"


def block(data_dir: Path, value: str, *, reason: str, kind: RuleKind | None = None) -> tuple[BlockRule, int]:
    """Add a rule and remove the stored documents it matches; returns (rule, documents removed)."""
    crawl = CrawlDir(data_dir)
    rule = BlockList(crawl.blocklist).add(kind or rule_kind(value), value, reason=reason)
    removals: list[Removal] = []
    store = DocStore(crawl.docs)
    if crawl.docs.exists() and store.segments():
        frame = store.latest_frame(["url"])
        for doc_id, url in zip(frame["doc_id"].to_list(), frame["url"].to_list(), strict=True):
            if rule.matches(url):
                removals.append(Removal(doc_id, url, rule.describe(), rule.added_at))
    if removals:
        DeletionLog(crawl.deletions, worker=OPERATOR).record(removals)
    return rule, len(removals)
