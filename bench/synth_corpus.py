"""A large synthetic corpus for serving benchmarks, made from real text.

The evaluation collections hold 2,860 documents; a serving benchmark needs 100,000.
Each synthetic document takes the title of one real document and 3–6 sentences drawn
(seeded, so the corpus is the same every run) from others, giving realistic term
statistics without duplicating any document. Sources: cranfield and cisi abstracts,
plus the crawled Python docs when a crawl data directory is given.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from pathlib import Path

from core.types import Document, doc_id_for

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def source_texts(eval_dir: Path, crawl_dir: Path | None = None) -> tuple[list[str], list[str]]:
    titles: list[str] = []
    sentences: list[str] = []
    for name in ("cranfield", "cisi"):
        with (eval_dir / name / "corpus.jsonl").open(encoding="utf-8") as handle:
            for line in handle:
                record = json.loads(line)
                if record.get("title"):
                    titles.append(" ".join(str(record["title"]).split()))
                sentences.extend(
                    s for s in _SENTENCE.split(" ".join(str(record["text"]).split())) if len(s) > 30
                )
    if crawl_dir is not None and (crawl_dir / "docs").exists():
        from core.docstore import DocStore

        for doc in DocStore(crawl_dir / "docs").iter_documents():
            titles.append(doc.title)
            sentences.extend(s for s in _SENTENCE.split(" ".join(doc.body.split())) if 30 < len(s) < 400)
    return titles, sentences


def synthetic_documents(
    n: int, eval_dir: Path, *, seed: int = 7, crawl_dir: Path | None = None
) -> Iterator[Document]:
    titles, sentences = source_texts(eval_dir, crawl_dir)
    rng = random.Random(seed)
    hosts = [f"host{i:02d}.bench.example" for i in range(40)]
    for i in range(n):
        host = hosts[i % len(hosts)]
        url = f"https://{host}/doc/{i}"
        body = " ".join(rng.choice(sentences) for _ in range(rng.randint(3, 6)))
        yield Document(
            doc_id=doc_id_for(url),
            url=url,
            title=rng.choice(titles),
            body=body,
            host=host,
            lang="en",
            filetype="html",
        )
