"""The crawl-derived judged sets the ranker recipes train on, built by one command on any machine.

``rankers.toml``'s ``ltr`` recipe (the default model's, held out) trains on
``data/eval-crawl/{pydocs,pgdocs,sqlitedocs}``: known-item sets derived from crawls of three
documentation sites that Debian ships as HTML. They are built, not shipped (each is a crawl
of someone else's pages), so a fresh checkout lacks them; :func:`require_collections` turns
"not a BEIR collection" into the one command that builds what is missing, and
:func:`build_crawl_set` is that command's work: the site served and crawled on loopback as
the demo does (``trawl demo --no-serve --no-embed``), then ``trawl dataset from-crawl``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from core.errors import ConfigError
from training.crawl_dataset import CrawlDatasetReport, build_crawl_dataset

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class CrawlSite:
    name: str
    root: Path
    package: str
    """The Debian package that installs ``root``."""


SITES: dict[str, CrawlSite] = {
    site.name: site
    for site in (
        CrawlSite("pydocs", Path("/usr/share/doc/python3.11/html"), "python3.11-doc"),
        CrawlSite("pgdocs", Path("/usr/share/doc/postgresql-doc-15/html"), "postgresql-doc-15"),
        CrawlSite("sqlitedocs", Path("/usr/share/doc/sqlite3"), "sqlite3-doc"),
    )
}


def is_collection(path: Path) -> bool:
    return all((path / name).exists() for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"))


def require_collections(paths: Iterable[Path], *, wanted_by: str) -> None:
    """Refuse, in one message, collections that are not there, saying how to get each."""
    missing = [Path(p) for p in paths if not is_collection(Path(p))]
    if not missing:
        return
    known = [p.name for p in missing if p.name in SITES]
    lines = [f"{wanted_by} needs collections that are not here: {', '.join(str(p) for p in missing)}."]
    if known:
        packages = " ".join(SITES[n].package for n in known)
        sites = " ".join(f"--site {n}" for n in known)
        lines.append(
            f"Build the crawl-derived ones with `trawl dataset crawl-sets {sites}` (each crawls a "
            f"Debian-packaged documentation site on loopback, a minute or two; needs {packages})."
        )
    if len(known) < len(missing):
        lines.append("The others are BEIR collections to provide (corpus.jsonl, queries.jsonl, qrels).")
    raise ConfigError(" ".join(lines))


def build_crawl_set(name: str, out: Path, *, site_port: int, root: Path | None = None) -> CrawlDatasetReport:
    """Crawl site ``name`` (or the folder ``root``), served on loopback at ``site_port``, and write
    its judged set to ``out``."""
    site = SITES.get(name)
    root = root or (site.root if site else None)
    if root is None:
        raise ConfigError(f"unknown site {name!r}: one of {', '.join(SITES)}, or give its folder")
    if not (root / "index.html").exists():
        install = f" (apt-get install {site.package})" if site and root == site.root else ""
        raise ConfigError(f"{name}: {root}/index.html is missing{install}")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix=f"trawl-{name}-") as data:
        crawl = [sys.executable, "-m", "cli.main", "demo", "--site", str(root), "--data", data]
        crawl += ["--no-serve", "--no-embed", "--site-port", str(site_port)]
        done = subprocess.run(crawl, cwd=REPO, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ConfigError(f"{name}: the crawl of {root} failed: {done.stderr.strip()[-500:]}")
        return build_crawl_dataset(Path(data) / "crawl", out)
