"""Build the hand-judged everyday-query collection over a crawl-derived corpus (BEIR layout).

``everyday-pydocs.tsv`` holds queries a Python programmer types into the demo's search
box, judged by hand for the page they want (written before any ranker was run on them).
The crawl-derived set (``trawl dataset from-crawl``) measures known-item queries made
from the site's own anchors, titles and headings; these are the other kind: short,
loosely worded, with one obvious answer, the kind the issue found LTR losing on. The
corpus is the crawl-derived set's, copied as it is, so the pages are the demo's pages.

    python bench/relevance/everyday_set.py --corpus data/eval-crawl/pydocs \\
        --out data/eval-hand/pydocs-everyday
    trawl eval --dataset data/eval-hand/pydocs-everyday --ranker bm25 --json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

JUDGMENTS = Path(__file__).with_name("everyday-pydocs.tsv")


def read_judgments(path: Path) -> dict[str, dict[str, int]]:
    """Query text → page path (relative to the site root) → grade."""
    out: dict[str, dict[str, int]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not parts[2].isdigit():
            raise SystemExit(f"{path}:{number}: expected 'query<TAB>page<TAB>grade', got {line!r}")
        out.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return out


def site_root(url: str) -> str:
    """The crawled site's root of a document id (every id of a crawl-derived corpus shares it)."""
    return url[: url.index("/", url.index("//") + 2) + 1]


def build(corpus_dir: Path, out: Path, judgments: Path = JUDGMENTS) -> tuple[int, str]:
    """Write ``out`` (corpus, queries, qrels); the number of queries and the site root.

    Fails on a judged page the corpus lacks.
    """
    corpus = corpus_dir / "corpus.jsonl"
    with corpus.open(encoding="utf-8") as handle:
        ids = [json.loads(line)["_id"] for line in handle if line.strip()]
    root = site_root(ids[0])
    known = set(ids)
    judged = read_judgments(judgments)
    missing = sorted({page for pages in judged.values() for page in pages if root + page not in known})
    if missing:
        raise SystemExit(f"pages judged but not in {corpus}: {', '.join(missing)}")
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(corpus, out / "corpus.jsonl")
    with (
        (out / "queries.jsonl").open("w", encoding="utf-8") as queries,
        (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as qrels,
    ):
        qrels.write("query-id\tcorpus-id\tscore\n")
        for text, pages in judged.items():
            qid = "h" + hashlib.blake2b(text.encode(), digest_size=6).hexdigest()
            queries.write(json.dumps({"_id": qid, "text": text, "metadata": {"kind": "everyday"}}) + "\n")
            for page, grade in pages.items():
                qrels.write(f"{qid}\t{root}{page}\t{grade}\n")
    return len(judged), root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpus", type=Path, required=True, help="A crawl-derived BEIR set of the demo site."
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--judgments",
        type=Path,
        default=JUDGMENTS,
        help="A judged TSV (default everyday-pydocs.tsv; keywords-pydocs.tsv holds the keyword queries).",
    )
    args = parser.parse_args(argv)
    count, root = build(args.corpus, args.out, args.judgments)
    print(f"{args.out}: {count} hand-judged queries over {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
