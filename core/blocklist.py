"""Operator block lists: hosts and URL patterns that are neither crawled nor served.

One JSON file in the crawl directory (``CrawlDir.blocklist``), replaced atomically, so
every crawl worker sharing the directory sees a change on its next lease (the file is
re-read when its modification time changes) and the ``trawl block`` command, the admin
API and ``trawl inspect`` all read the same rules with their reasons.

A host rule matches the host and its subdomains; a pattern rule is a shell-style glob
over the whole canonical URL (``http://example.com/private/*``).

Example::

    rules = BlockList(CrawlDir(data).blocklist)
    rules.add("host", "spam.example", reason="link farm")
    rules.match("http://a.spam.example/x")   # → BlockRule(kind="host", ...)
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
from core.errors import ConfigError

__all__ = ["BlockList", "BlockRule"]

RuleKind = Literal["host", "pattern"]


@dataclass(frozen=True, slots=True)
class BlockRule:
    kind: RuleKind
    value: str
    reason: str
    added_at: float

    def matches(self, url: str) -> bool:
        if self.kind == "pattern":
            return fnmatchcase(url, self.value)
        try:
            host = (urlsplit(url).hostname or "").lower()
        except ValueError:
            return False
        return host == self.value or host.endswith("." + self.value)


class BlockList:
    """The rules in one file; cheap to ask often (re-read only when the file changed)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self._rules: tuple[BlockRule, ...] = ()

    def rules(self) -> tuple[BlockRule, ...]:
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
        kept = [r for r in self.rules() if (r.kind, r.value) != (kind, value)]
        self._write([*kept, rule])
        return rule

    def remove(self, value: str) -> bool:
        """Drop every rule with this value; True when one was there."""
        rules = self.rules()
        kept = [r for r in rules if r.value not in (value, value.lower().strip("."))]
        if len(kept) == len(rules):
            return False
        self._write(kept)
        return True

    def _write(self, rules: list[BlockRule]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text(self.path, json.dumps({"rules": [asdict(r) for r in rules]}, indent=1))
        self._stamp = None
