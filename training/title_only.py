"""Title-only variants of a BEIR collection: the body of half the documents dropped, seeded.

A robustness yardstick: web indexes hold many pages whose only text is a title (PDF
links, thin pages). A ranker whose field statistics favour or bury such documents
shows it here. Queries and judgments are copied unchanged; ``folds.tsv`` and
``leakage.jsonl`` too when present. Which documents lose their body is a seeded hash
of the id, so a variant is reproducible and independent of file order.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from core.atomic import staging_dir
from training.datasets import BeirDataset

COPIED = ("queries.jsonl", "folds.tsv", "leakage.jsonl")


@dataclass(frozen=True, slots=True)
class TitleOnlyReport:
    out: Path
    documents: int
    title_only: int


def drops_body(external_id: str, seed: int, share: float = 0.5) -> bool:
    digest = hashlib.blake2b(f"{seed}:{external_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < share


def title_only_variant(
    dataset_dir: Path, out: Path, *, seed: int = 0, share: float = 0.5, body_words: int | None = None
) -> TitleOnlyReport:
    """Write ``out``: ``dataset_dir`` with the body of about ``share`` of its documents removed
    and, with ``body_words``, every other body cut to its first ``body_words`` words (short
    documents, about half of them title-only: the shape issue 49's held-back collection has)."""
    dataset = BeirDataset.open(dataset_dir)
    documents = dropped = 0
    with staging_dir(Path(out)) as tmp:
        with (
            (dataset.root / "corpus.jsonl").open(encoding="utf-8") as src,
            (tmp / "corpus.jsonl").open("w", encoding="utf-8") as dst,
        ):
            for line in src:
                if not line.strip():
                    continue
                record = json.loads(line)
                documents += 1
                if drops_body(str(record["_id"]), seed, share):
                    record["text"] = ""
                    dropped += 1
                elif body_words is not None:
                    record["text"] = " ".join(str(record.get("text") or "").split()[:body_words])
                dst.write(json.dumps(record, ensure_ascii=False) + "\n")
        for name in COPIED:
            if (dataset.root / name).exists():
                shutil.copyfile(dataset.root / name, tmp / name)
        shutil.copytree(dataset.root / "qrels", tmp / "qrels")
    return TitleOnlyReport(Path(out), documents, dropped)
