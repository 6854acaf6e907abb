"""Run every reported relevance condition and say which figures moved.

    python -m bench.relevance.reproduce --eval-dir DIR [--quick] [--write docs/relevance.md]

Each condition of ``bench/relevance/conditions.toml`` goes through ``trawl eval``'s own
function (the served path); a score that differs from the expected one at four decimals
is a moved figure, and the exit status is 1. ``--write`` replaces the table between the
``conditions`` markers of the given Markdown file with the scores just measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

CONDITIONS = Path(__file__).with_name("conditions.toml")
METRICS = ("ndcg@10", "map", "recall@100", "mrr@10")
BEGIN, END = "<!-- conditions:begin -->", "<!-- conditions:end -->"


@dataclass(frozen=True, slots=True)
class Condition:
    collection: str
    ranker: str
    expected: dict[str, float]
    quick: bool = False

    @property
    def name(self) -> str:
        return f"{self.collection} · {self.ranker}"


def load_conditions(path: Path = CONDITIONS) -> list[Condition]:
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    return [Condition(**entry) for entry in raw["condition"]]


def measure(condition: Condition, eval_dir: Path) -> dict[str, float]:
    """The condition's four scores, rounded as reported."""
    from core.settings import Settings
    from training.evaluate import evaluate

    result = evaluate(eval_dir / condition.collection, condition.ranker, settings=Settings())
    return {m: round(result.means[m], 4) for m in METRICS}


def moved(condition: Condition, got: dict[str, float]) -> list[str]:
    return [
        f"{m} {condition.expected[m]:.4f} -> {got[m]:.4f}"
        for m in METRICS
        if abs(got[m] - condition.expected[m]) >= 0.00005
    ]


def table(rows: list[tuple[Condition, dict[str, float]]]) -> str:
    lines = [
        "| collection | ranker | nDCG@10 | MAP | Recall@100 | MRR@10 |",
        "|---|---|---|---|---|---|",
    ]
    for condition, got in rows:
        scores = " | ".join(f"{got[m]:.4f}" for m in METRICS)
        lines.append(f"| {condition.collection} | {condition.ranker} | {scores} |")
    return "\n".join(lines)


def rewrite(markdown: Path, rows: list[tuple[Condition, dict[str, float]]]) -> None:
    text = markdown.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{markdown} has no {BEGIN} … {END} markers to write the table between.")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    markdown.write_text(f"{head}{BEGIN}\n{table(rows)}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, default=os.environ.get("TRAWL_EVAL_DIR"))
    parser.add_argument("--quick", action="store_true", help="Only the conditions marked quick.")
    parser.add_argument("--write", type=Path, help="Markdown file whose conditions table to rewrite.")
    args = parser.parse_args(argv)
    if args.eval_dir is None:
        parser.error("give --eval-dir DIR (or set TRAWL_EVAL_DIR): the folder of the BEIR collections")
    conditions = [c for c in load_conditions() if c.quick or not args.quick]
    rows, changes = [], 0
    for condition in conditions:
        got = measure(condition, args.eval_dir)
        rows.append((condition, got))
        diff = moved(condition, got)
        changes += bool(diff)
        print(f"{condition.name}: {'MOVED ' + '; '.join(diff) if diff else 'as expected'}", flush=True)
    if args.write:
        rewrite(args.write, rows)
    print(f"{len(conditions)} conditions, {changes} moved")
    return 1 if changes else 0


if __name__ == "__main__":
    sys.exit(main())
