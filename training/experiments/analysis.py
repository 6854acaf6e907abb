"""``report(name)``: the analysis that decides an online experiment, from the Parquet logs.

A/B: per variant, CTR (clicks per result shown), clicks per query, abandonment (share
of queries with no click) and MRR of clicks (reciprocal rank of the first click, 0
without one). Users, not queries, are independent (a user is bucketed once and
searches many times), so every metric is a ratio of per-user sums, with a
delta-method interval and a z-test of each variant against the first (control);
Holm-adjusted when several variants are compared. Sample-ratio mismatch: a
chi-square test of users per variant against the configured split; a tiny p means
the split is broken (a redirect, a bot, a crash in one arm) and no metric can be
trusted.

Interleaving: each impression prefers the team with more clicks; a binomial sign test
over impressions with a preference, and the same per distinct query (clicks summed
over its impressions), so a few heavy queries cannot decide alone.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from core.errors import ConfigError
from online.book import Experiment, ExperimentBook
from online.logs import CLICK_SCHEMA, IMPRESSION_SCHEMA, LogPaths, read_log
from training.experiments.significance import difference_test, holm, ratio_estimate, sign_test, srm_chisquare

logger = logging.getLogger(__name__)

AB_METRICS: dict[str, tuple[str, str]] = {
    "ctr": ("clicks", "results"),
    "clicks_per_query": ("clicks", "impressions"),
    "abandonment": ("abandoned", "impressions"),
    "mrr_clicks": ("rr", "impressions"),
}
"""metric → (numerator, denominator) columns of the per-user sums."""
SRM_ALPHA = 0.001


def load_outcomes(log_dir: Path, experiment: str) -> pl.DataFrame:
    """One row per impression of ``experiment`` with its click outcome.

    Columns: impression_id, unit_id, variant, query, results, clicks, first_click,
    a_clicks, b_clicks. A repeated click on the same position counts once.
    """
    paths = LogPaths.under(log_dir)
    imps = pl.from_arrow(read_log(paths.impressions, IMPRESSION_SCHEMA))
    clicks = pl.from_arrow(read_log(paths.clicks, CLICK_SCHEMA))
    assert isinstance(imps, pl.DataFrame) and isinstance(clicks, pl.DataFrame)
    imps = imps.filter(pl.col("experiment") == experiment).select(
        "impression_id",
        "unit_id",
        "variant",
        pl.col("query").str.to_lowercase().str.strip_chars().alias("query"),
        pl.col("doc_ids").list.len().cast(pl.Int64).alias("results"),
    )
    per_imp = (
        clicks.filter(pl.col("experiment") == experiment)
        .unique(subset=["impression_id", "position"])
        .group_by("impression_id")
        .agg(
            pl.len().cast(pl.Int64).alias("clicks"),
            pl.col("position").min().alias("first_click"),
            (pl.col("team") == "a").sum().cast(pl.Int64).alias("a_clicks"),
            (pl.col("team") == "b").sum().cast(pl.Int64).alias("b_clicks"),
        )
    )
    out = imps.join(per_imp, on="impression_id", how="left").with_columns(
        pl.col("clicks").fill_null(0),
        pl.col("a_clicks").fill_null(0),
        pl.col("b_clicks").fill_null(0),
    )
    return out


@dataclass(frozen=True, slots=True)
class MetricValue:
    value: float
    ci95: tuple[float, float]


@dataclass(frozen=True, slots=True)
class VariantStats:
    variant: str
    users: int
    impressions: int
    clicks: int
    metrics: dict[str, MetricValue]


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """``variant`` − control for one metric."""

    metric: str
    variant: str
    control: str
    delta: float
    ci95: tuple[float, float]
    p_value: float
    p_holm: float


@dataclass(frozen=True, slots=True)
class SrmCheck:
    expected_share: dict[str, float]
    users: dict[str, int]
    p_value: float

    @property
    def mismatch(self) -> bool:
        return self.p_value < SRM_ALPHA


@dataclass(frozen=True, slots=True)
class InterleavingResult:
    impressions: int
    wins_a: int
    wins_b: int
    ties: int
    delta_ab: float
    """(wins_b − wins_a) / impressions: > 0 favours B (Chapelle et al. 2012)."""
    p_sign: float
    queries: int
    query_wins_a: int
    query_wins_b: int
    query_ties: int
    p_sign_queries: float

    @property
    def preferred(self) -> str:
        return "b" if self.wins_b > self.wins_a else "a" if self.wins_a > self.wins_b else "tie"


@dataclass(frozen=True, slots=True)
class ExperimentReport:
    name: str
    mode: str
    variants: tuple[VariantStats, ...]
    comparisons: tuple[MetricComparison, ...]
    srm: SrmCheck | None
    interleaving: InterleavingResult | None
    rankers: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        def clean(obj: Any) -> Any:
            if isinstance(obj, float):
                return None if math.isnan(obj) else round(obj, 6)
            if isinstance(obj, dict):
                return {k: clean(v) for k, v in obj.items()}
            if isinstance(obj, (list, tuple)):
                return [clean(v) for v in obj]
            return obj

        out: dict[str, Any] = {
            "experiment": self.name,
            "mode": self.mode,
            "rankers": self.rankers,
            "variants": [asdict(v) for v in self.variants],
            "comparisons": [asdict(c) for c in self.comparisons],
            "srm": None if self.srm is None else {**asdict(self.srm), "mismatch": self.srm.mismatch},
            "interleaving": None
            if self.interleaving is None
            else {**asdict(self.interleaving), "preferred": self.interleaving.preferred},
        }
        cleaned: dict[str, Any] = clean(out)
        return cleaned

    def to_markdown(self) -> str:
        lines = [f"# Experiment {self.name} ({self.mode})", ""]
        lines.append("Rankers: " + ", ".join(f"{v} = `{r}`" for v, r in self.rankers.items()))
        lines.append("")
        if self.srm is not None:
            flag = "**MISMATCH: do not trust the metrics**" if self.srm.mismatch else "ok"
            lines += [
                f"Sample ratio: users {self.srm.users}, chi-square p = {self.srm.p_value:.4g} ({flag})",
                "",
            ]
        if self.variants:
            names = list(AB_METRICS)
            lines.append("| variant | users | impressions | clicks | " + " | ".join(names) + " |")
            lines.append("|---" * (4 + len(names)) + "|")
            for v in self.variants:
                cells = [
                    f"{v.metrics[m].value:.4f} [{v.metrics[m].ci95[0]:.4f}, {v.metrics[m].ci95[1]:.4f}]"
                    for m in names
                ]
                lines.append(
                    f"| {v.variant} | {v.users} | {v.impressions} | {v.clicks} | " + " | ".join(cells) + " |"
                )
            lines.append("")
        if self.comparisons:
            lines += [
                "| metric | variant − control | delta | 95% CI | p | p (Holm) |",
                "|---|---|---|---|---|---|",
            ]
            for c in self.comparisons:
                lines.append(
                    f"| {c.metric} | {c.variant} − {c.control} | {c.delta:+.4f} "
                    f"| [{c.ci95[0]:+.4f}, {c.ci95[1]:+.4f}] | {c.p_value:.4g} | {c.p_holm:.4g} |"
                )
        if self.interleaving is not None:
            r = self.interleaving
            lines += [
                f"Impressions: {r.impressions}; wins A/B/ties: {r.wins_a}/{r.wins_b}/{r.ties}; "
                f"delta_AB = {r.delta_ab:+.4f}; sign test p = {r.p_sign:.4g}; preferred: {r.preferred}",
                f"Queries: {r.queries}; wins A/B/ties: {r.query_wins_a}/{r.query_wins_b}/{r.query_ties}; "
                f"sign test p = {r.p_sign_queries:.4g}",
            ]
        return "\n".join(lines) + "\n"


def _ab(
    experiment: Experiment, outcomes: pl.DataFrame
) -> tuple[tuple[VariantStats, ...], tuple[MetricComparison, ...]]:
    per_user = (
        outcomes.with_columns(
            (pl.col("clicks") == 0).cast(pl.Int64).alias("abandoned"),
            pl.when(pl.col("first_click").is_null())
            .then(0.0)
            .otherwise(1.0 / pl.col("first_click"))
            .alias("rr"),
        )
        .group_by("variant", "unit_id")
        .agg(
            pl.len().cast(pl.Float64).alias("impressions"),
            pl.col("results").sum().cast(pl.Float64),
            pl.col("clicks").sum().cast(pl.Float64),
            pl.col("abandoned").sum().cast(pl.Float64),
            pl.col("rr").sum().cast(pl.Float64),
        )
    )
    estimates: dict[str, dict[str, Any]] = {}
    stats: list[VariantStats] = []
    for variant in experiment.variants:
        rows = per_user.filter(pl.col("variant") == variant.name)
        est = {
            m: ratio_estimate(
                rows[num].to_numpy().astype(np.float64), rows[den].to_numpy().astype(np.float64)
            )
            for m, (num, den) in AB_METRICS.items()
        }
        estimates[variant.name] = est
        stats.append(
            VariantStats(
                variant=variant.name,
                users=rows.height,
                impressions=int(rows["impressions"].sum()) if rows.height else 0,
                clicks=int(rows["clicks"].sum()) if rows.height else 0,
                metrics={m: MetricValue(e.value, e.ci95()) for m, e in est.items()},
            )
        )
    control = experiment.variants[0].name
    comparisons: list[MetricComparison] = []
    for metric in AB_METRICS:
        raw = [
            (v.name, *difference_test(estimates[control][metric], estimates[v.name][metric]))
            for v in experiment.variants[1:]
        ]
        adjusted = holm([1.0 if math.isnan(p) else p for *_, p in raw])
        for (name, delta, ci, p), p_h in zip(raw, adjusted, strict=True):
            comparisons.append(MetricComparison(metric, name, control, delta, ci, p, p_h))
    return tuple(stats), tuple(comparisons)


def _srm(experiment: Experiment, outcomes: pl.DataFrame) -> SrmCheck:
    users = {
        v.name: outcomes.filter(pl.col("variant") == v.name)["unit_id"].n_unique()
        for v in experiment.variants
    }
    p = srm_chisquare(list(users.values()), list(experiment.weights))
    if p < SRM_ALPHA:
        logger.warning("experiment %s: sample-ratio mismatch (p=%.3g, users %s)", experiment.name, p, users)
    return SrmCheck(dict(zip(users, experiment.weights, strict=True)), users, p)


def _interleaving(outcomes: pl.DataFrame) -> InterleavingResult:
    a = outcomes["a_clicks"].to_numpy()
    b = outcomes["b_clicks"].to_numpy()
    wins_a, wins_b = int(np.count_nonzero(a > b)), int(np.count_nonzero(b > a))
    n = outcomes.height
    per_query = outcomes.group_by("query").agg(pl.col("a_clicks").sum(), pl.col("b_clicks").sum())
    qa, qb = per_query["a_clicks"].to_numpy(), per_query["b_clicks"].to_numpy()
    q_wins_a, q_wins_b = int(np.count_nonzero(qa > qb)), int(np.count_nonzero(qb > qa))
    return InterleavingResult(
        impressions=n,
        wins_a=wins_a,
        wins_b=wins_b,
        ties=n - wins_a - wins_b,
        delta_ab=(wins_b - wins_a) / n if n else math.nan,
        p_sign=sign_test(wins_b, wins_a),
        queries=per_query.height,
        query_wins_a=q_wins_a,
        query_wins_b=q_wins_b,
        query_ties=per_query.height - q_wins_a - q_wins_b,
        p_sign_queries=sign_test(q_wins_b, q_wins_a),
    )


def report(name: str, *, log_dir: Path, book: ExperimentBook) -> ExperimentReport:
    """Analyse experiment ``name`` (declared in ``book``) from the logs under ``log_dir``."""
    experiment = book.get(name)
    outcomes = load_outcomes(log_dir, name)
    if outcomes.height == 0:
        raise ConfigError(f"No impressions of experiment {name!r} under {log_dir}; has it run yet?")
    rankers = {v.name: v.ranker for v in experiment.variants}
    if experiment.mode == "interleave":
        return ExperimentReport(name, "interleave", (), (), None, _interleaving(outcomes), rankers)
    variants, comparisons = _ab(experiment, outcomes)
    return ExperimentReport(name, "ab", variants, comparisons, _srm(experiment, outcomes), None, rankers)
