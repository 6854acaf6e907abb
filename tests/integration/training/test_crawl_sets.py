"""``trawl dataset crawl-sets``: the judged sets a ranker recipe trains on, built on a fresh checkout.

A recipe naming a crawl-derived set that is not built yet fails in one line that gives the
command building it; the command crawls a site on loopback and writes a collection that
``BeirDataset`` loads, every judgment pointing into its corpus.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import ConfigError
from tests.fixtures.cli import run_trawl
from training.crawl_sets import require_collections
from training.datasets import BeirDataset

TOPICS = ("sockets", "threads", "files", "errors", "unicode", "regex")


def _site(root: Path) -> Path:
    root.mkdir()
    links = "".join(f'<li><a href="{t}.html">{t.title()} guide</a></li>' for t in TOPICS)
    (root / "index.html").write_text(
        f"<html><head><title>Tiny docs</title></head><body><ul>{links}</ul></body></html>"
    )
    for topic in TOPICS:
        others = "".join(f'<a href="{t}.html">working with {t}</a> ' for t in TOPICS if t != topic)
        (root / f"{topic}.html").write_text(
            f"<html><head><title>{topic.title()} guide</title></head><body><h1>{topic}</h1>"
            f"<h2>{topic} basics</h2><p>All about {topic} in Python.</p><h2>{topic} pitfalls</h2>"
            f"<p>What goes wrong with {topic}.</p>{others}<a href='index.html'>home</a></body></html>"
        )
    return root


def test_a_missing_set_is_refused_with_the_command_that_builds_it(tmp_path: Path, eval_dir: Path) -> None:
    missing = tmp_path / "eval-crawl" / "pydocs"
    with pytest.raises(ConfigError) as refused:
        require_collections([eval_dir / "cranfield", missing, tmp_path / "nowhere"], wanted_by="this recipe")
    message = str(refused.value)
    assert f"{missing}, {tmp_path / 'nowhere'}." in message and str(eval_dir / "cranfield") not in message
    assert "`trawl dataset crawl-sets --site pydocs`" in message and "python3.11-doc" in message
    # Through the command line: one line, exit 2, no traceback.
    done = run_trawl(
        "eval", "--dataset", str(eval_dir / "cranfield"), "--ranker", "ltr", "--train-with", str(missing)
    )
    assert done.returncode == 2, done.stderr
    assert "trawl dataset crawl-sets --site pydocs" in done.stderr and "Traceback" not in done.stderr


def test_crawl_sets_crawls_a_site_into_a_judged_collection(tmp_path: Path) -> None:
    site = _site(tmp_path / "site")
    out = tmp_path / "sets"
    done = run_trawl("dataset", "crawl-sets", "--root", f"tiny={site}", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"{out / 'tiny'}:" in done.stdout + done.stderr
    dataset = BeirDataset.open(out / "tiny")
    corpus = {json.loads(line)["_id"] for line in (out / "tiny" / "corpus.jsonl").read_text().splitlines()}
    qrels = dataset.qrels()
    assert len(corpus) == len(TOPICS) + 1 and len(qrels) >= len(TOPICS)
    assert all(doc in corpus for judged in qrels.values() for doc in judged)
