"""Offline paired comparison of rankers on judged collections.

Both rankers answer the same queries, so the comparison is paired: per-query metric
deltas (B − A), their mean with a bootstrap interval, a paired randomization test
(no normality assumption; the reference) and a paired t-test (the classic one, for
comparison with published numbers), and win/tie/loss counts. Comparing several
rankers against one baseline multiplies the chances of a false win, so their
p-values are Holm-adjusted. With several collections the queries are pooled (ids
prefixed by the collection) and each collection is also reported on its own.

Example::

    report = compare(["bm25", "hybrid"], [Path("data/eval/cisi")], settings=Settings())
    write_markdown(report, Path("reports/"))
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core import atomic
from core.errors import ConfigError
from core.settings import Settings
from training.evaluate import EvalResult, evaluate
from training.experiments.plot import delta_histogram_svg
from training.experiments.rankers_config import RankerCatalog
from training.experiments.significance import bootstrap_mean_ci, holm, paired_ttest, randomization_test

logger = logging.getLogger(__name__)

METRICS = ("ndcg@10", "map", "recall@100", "mrr@10")
TIE_EPS = 1e-9
"""Per-query scores closer than this are a tie (pytrec_eval rounds nothing, floats differ)."""


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """A against B on one set of queries; ``wins`` counts queries where B beats A."""

    a: str
    b: str
    metric: str
    scope: str
    """The collection name, or ``all`` for the pooled queries."""
    qids: tuple[str, ...]
    scores_a: tuple[float, ...]
    scores_b: tuple[float, ...]
    mean_a: float
    mean_b: float
    delta: float
    ci95: tuple[float, float]
    p_randomization: float
    p_ttest: float
    wins: int
    ties: int
    losses: int
    p_randomization_holm: float | None = None
    p_ttest_holm: float | None = None

    @property
    def deltas(self) -> list[float]:
        return [b - a for a, b in zip(self.scores_a, self.scores_b, strict=True)]

    def to_json(self) -> dict[str, Any]:
        """The documented ``trawl experiment compare --json`` object (Holm keys when adjusted)."""
        out: dict[str, Any] = {
            "a": self.a,
            "b": self.b,
            "metric": self.metric,
            "mean_a": round(self.mean_a, 6),
            "mean_b": round(self.mean_b, 6),
            "delta": round(self.delta, 6),
            "ci95": [round(self.ci95[0], 6), round(self.ci95[1], 6)],
            "p_randomization": _sig(self.p_randomization),
            "p_ttest": _sig(self.p_ttest),
            "wins": self.wins,
            "ties": self.ties,
            "losses": self.losses,
        }
        if self.p_randomization_holm is not None and self.p_ttest_holm is not None:
            out["p_randomization_holm"] = _sig(self.p_randomization_holm)
            out["p_ttest_holm"] = _sig(self.p_ttest_holm)
        return out


def _sig(p: float) -> float:
    """p-values keep 4 significant digits: a tiny p must not print as 0."""
    return float(f"{p:.4g}")


def paired(
    a: str,
    b: str,
    qids: Sequence[str],
    scores_a: Sequence[float],
    scores_b: Sequence[float],
    *,
    metric: str = "ndcg@10",
    scope: str = "all",
    resamples: int = 10_000,
    seed: int = 0,
) -> PairedComparison:
    """All the paired statistics of two aligned per-query score lists."""
    xa = np.asarray(scores_a, dtype=np.float64)
    xb = np.asarray(scores_b, dtype=np.float64)
    if xa.shape != xb.shape or xa.size != len(qids) or xa.size == 0:
        raise ConfigError(
            f"paired comparison needs equal, non-empty score lists; got {xa.size} and {xb.size}."
        )
    d = xb - xa
    return PairedComparison(
        a=a,
        b=b,
        metric=metric,
        scope=scope,
        qids=tuple(qids),
        scores_a=tuple(float(v) for v in xa),
        scores_b=tuple(float(v) for v in xb),
        mean_a=float(xa.mean()),
        mean_b=float(xb.mean()),
        delta=float(d.mean()),
        ci95=bootstrap_mean_ci(d, resamples=resamples, seed=seed),
        p_randomization=randomization_test(d, resamples=resamples, seed=seed),
        p_ttest=paired_ttest(d),
        wins=int(np.count_nonzero(d > TIE_EPS)),
        ties=int(np.count_nonzero(np.abs(d) <= TIE_EPS)),
        losses=int(np.count_nonzero(d < -TIE_EPS)),
    )


def from_results(
    a: Sequence[EvalResult], b: Sequence[EvalResult], *, metric: str = "ndcg@10", **kw: Any
) -> tuple[PairedComparison, tuple[PairedComparison, ...]]:
    """Pooled and per-collection comparisons from the two rankers' evaluation results."""
    if metric not in METRICS:
        raise ConfigError(f"Unknown metric {metric!r}; expected one of: {', '.join(METRICS)}.")
    per: list[PairedComparison] = []
    pooled_q: list[str] = []
    pooled_a: list[float] = []
    pooled_b: list[float] = []
    for ra, rb in zip(a, b, strict=True):
        if set(ra.per_query) != set(rb.per_query):
            raise ConfigError(f"{ra.dataset}: the two runs scored different queries; cannot pair them.")
        qids = sorted(ra.per_query)
        sa = [ra.per_query[q][metric] for q in qids]
        sb = [rb.per_query[q][metric] for q in qids]
        per.append(paired(ra.ranker, rb.ranker, qids, sa, sb, metric=metric, scope=ra.dataset, **kw))
        pooled_q += [f"{ra.dataset}/{q}" for q in qids]
        pooled_a += sa
        pooled_b += sb
    pooled = paired(a[0].ranker, b[0].ranker, pooled_q, pooled_a, pooled_b, metric=metric, scope="all", **kw)
    return pooled, tuple(per)


@dataclass(frozen=True, slots=True)
class ComparisonReport:
    """Baseline ``a`` against one or more ``b``s, pooled and per collection."""

    a: str
    metric: str
    datasets: tuple[str, ...]
    pooled: tuple[PairedComparison, ...]
    """One per B, Holm-adjusted when there are several."""
    per_dataset: tuple[tuple[PairedComparison, ...], ...]
    """Aligned with ``pooled``: each B's per-collection comparisons."""
    versions: dict[str, str]
    """Ranker name → ``name@vN digest`` as resolved from the catalog."""


def compare(
    names: Sequence[str],
    datasets: Sequence[Path],
    *,
    settings: Settings,
    catalog: RankerCatalog | None = None,
    metric: str = "ndcg@10",
    resamples: int = 10_000,
    seed: int = 0,
    sample: int | None = None,
    sample_seed: int = 0,
) -> ComparisonReport:
    """Evaluate every ranker on every collection once, then compare each to ``names[0]``."""
    return compare_metrics(
        names,
        datasets,
        settings=settings,
        catalog=catalog,
        metrics=(metric,),
        resamples=resamples,
        seed=seed,
        sample=sample,
        sample_seed=sample_seed,
    )[0]


def compare_metrics(
    names: Sequence[str],
    datasets: Sequence[Path],
    *,
    settings: Settings,
    catalog: RankerCatalog | None = None,
    metrics: Sequence[str] = ("ndcg@10",),
    resamples: int = 10_000,
    seed: int = 0,
    sample: int | None = None,
    sample_seed: int = 0,
) -> list[ComparisonReport]:
    """One report per metric from a single evaluation of every ranker on every collection.

    ``sample``: each collection's seeded, kind-stratified query sample
    (:func:`training.evaluate.stratified_sample`), the same queries for every ranker.
    """
    if len(names) < 2 or len(set(names)) != len(names):
        raise ConfigError(
            f"compare needs a baseline and at least one other, distinct ranker; got {list(names)}."
        )
    if not datasets:
        raise ConfigError("compare needs at least one --dataset DIR.")
    for metric in metrics:
        if metric not in METRICS:
            raise ConfigError(f"Unknown metric {metric!r}; expected one of: {', '.join(METRICS)}.")
    catalog = catalog or RankerCatalog.load(settings.experiments.rankers_file)
    configs = {n: catalog.check_runnable(n) for n in names}
    results: dict[str, list[EvalResult]] = {}
    for name in names:
        cfg = configs[name]
        results[name] = []
        for ds in datasets:
            logger.info("evaluating %s on %s", cfg.key, ds)
            r = evaluate(
                ds, cfg.ranker, settings=settings, options=cfg.options, sample=sample, sample_seed=sample_seed
            )
            # Report under the requested name (a config may run a shared runner with other options).
            results[name].append(
                EvalResult(r.dataset, name, r.queries, r.means, r.per_query, r.seconds, r.extra)
            )
    versions = {n: f"{c.key} {c.digest}" for n, c in configs.items()}
    return [_report(names, results, versions, metric, resamples, seed) for metric in metrics]


def _report(
    names: Sequence[str],
    results: dict[str, list[EvalResult]],
    versions: dict[str, str],
    metric: str,
    resamples: int,
    seed: int,
) -> ComparisonReport:
    base = names[0]
    pooled: list[PairedComparison] = []
    per: list[tuple[PairedComparison, ...]] = []
    for other in names[1:]:
        p, d = from_results(results[base], results[other], metric=metric, resamples=resamples, seed=seed)
        pooled.append(p)
        per.append(d)
    if len(pooled) > 1:
        h_rand = holm([c.p_randomization for c in pooled])
        h_t = holm([c.p_ttest for c in pooled])
        pooled = [_with_holm(c, hr, ht) for c, hr, ht in zip(pooled, h_rand, h_t, strict=True)]
    return ComparisonReport(
        a=base,
        metric=metric,
        datasets=tuple(r.dataset for r in results[base]),
        pooled=tuple(pooled),
        per_dataset=tuple(per),
        versions=versions,
    )


def _with_holm(c: PairedComparison, p_rand: float, p_t: float) -> PairedComparison:
    from dataclasses import replace

    return replace(c, p_randomization_holm=p_rand, p_ttest_holm=p_t)


def _fmt_p(p: float | None) -> str:
    return "–" if p is None else f"{p:.2g}" if p < 0.001 else f"{p:.4f}"


def _row(c: PairedComparison) -> str:
    return (
        f"| {c.b} | {c.scope} | {len(c.qids)} | {c.mean_a:.4f} | {c.mean_b:.4f} | {c.delta:+.4f} "
        f"| [{c.ci95[0]:+.4f}, {c.ci95[1]:+.4f}] | {_fmt_p(c.p_randomization)} | {_fmt_p(c.p_ttest)} "
        f"| {_fmt_p(c.p_randomization_holm)} | {c.wins}/{c.ties}/{c.losses} |"
    )


def write_markdown(report: ComparisonReport, out_dir: Path) -> Path:
    """Write ``compare-A-vs-B.md`` with one delta histogram SVG per B beside it; returns the .md."""
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = "-".join(_slug(n) for n in (report.a, *(c.b for c in report.pooled)))
    md_path = out_dir / f"compare-{slug}.md"
    lines = [
        f"# Offline comparison: {' vs '.join([report.a, *(c.b for c in report.pooled)])}",
        "",
        f"Metric: **{report.metric}**; collections: {', '.join(report.datasets)}; baseline A = `{report.a}`.",
        "Delta = B − A per query; CI: percentile bootstrap over queries; p: paired randomization "
        "(sign flip) and paired t-test, two-sided; Holm-adjusted p when several Bs are compared. "
        "W/T/L: queries where B wins / ties / loses.",
        "",
        "Rankers: " + ", ".join(f"`{v}`" for v in report.versions.values()),
        "",
        "| B | queries from | n | mean A | mean B | delta | 95% CI | p rand | p t | p rand (Holm) | W/T/L |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for pooled, per in zip(report.pooled, report.per_dataset, strict=True):
        lines.append(_row(pooled))
        lines += [_row(c) for c in per]
    for pooled in report.pooled:
        svg_name = f"compare-{_slug(report.a)}-vs-{_slug(pooled.b)}-deltas.svg"
        svg = delta_histogram_svg(
            pooled.deltas,
            title=f"{pooled.metric}: {pooled.b} − {report.a}, {len(pooled.qids)} queries",
            xlabel=f"per-query {pooled.metric} delta (right: {pooled.b} better)",
        )
        atomic.write_text(out_dir / svg_name, svg)
        order = sorted(zip(pooled.deltas, pooled.qids, strict=True))
        lines += [
            "",
            f"## {pooled.b} vs {report.a}",
            "",
            f"![per-query delta histogram]({svg_name})",
            "",
            "Largest losses: " + ", ".join(f"{q} ({d:+.3f})" for d, q in order[:5] if d < 0),
            "",
            "Largest wins: " + ", ".join(f"{q} ({d:+.3f})" for d, q in reversed(order[-5:]) if d > 0),
        ]
    atomic.write_text(md_path, "\n".join(lines) + "\n")
    return md_path


def _slug(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
