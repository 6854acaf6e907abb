"""What an import writes into and reports: a crawl data directory that no crawl owns."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from core.atomic import write_text
from core.crawldir import CrawlDir
from core.dirlock import DirLock
from core.errors import ConfigError
from crawl.ingest.archive_records import Damage

__all__ = ["ImportSummary", "import_target", "refuse_a_crawl"]


@dataclass(slots=True)
class ImportSummary:
    """What an import read and what became of it."""

    files: int = 0
    records: int = 0
    responses: int = 0
    documents: int = 0
    edges: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    damaged: list[Damage] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def record(self, layout: CrawlDir) -> None:
        """Write this summary as the directory's ``imported.json``: the mark that an import owns it."""
        write_text(layout.imported, json.dumps(self.as_json(), indent=1))

    def as_json(self) -> dict[str, object]:
        data = asdict(self)
        data["damaged"] = [{"file": str(d.path), "offset": d.offset, "what": d.what} for d in self.damaged]
        return data


def refuse_a_crawl(layout: CrawlDir) -> None:
    """An import replaces docs/ and links/: never those of a crawl, which its database describes."""
    if layout.exists():
        raise ConfigError(
            f"{layout.root} holds a crawl (its {layout.db.name}); an import would replace its "
            "documents. Give the import a directory of its own."
        )
    if layout.docs.exists() and not layout.imported.exists():
        raise ConfigError(f"{layout.root} holds documents that no import wrote; give another directory.")


@contextmanager
def import_target(data_dir: Path) -> Iterator[CrawlDir]:
    """The directory an import writes, checked (never a crawl's) and locked for the import."""
    layout = CrawlDir(data_dir)
    refuse_a_crawl(layout)
    layout.root.mkdir(parents=True, exist_ok=True)
    with DirLock(layout.root / "lock", what=f"Crawl directory {layout.root}").held():
        # What an earlier import derived from its documents goes with them.
        shutil.rmtree(layout.deletions, ignore_errors=True)
        layout.pagerank.unlink(missing_ok=True)
        layout.pagerank_hosts.unlink(missing_ok=True)
        yield layout
