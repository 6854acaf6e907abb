"""The significance tests experiments share: paired, two-sample, sign and goodness-of-fit.

Kept apart from the experiment code so that each test is checked once (against scipy
or a slow reference) and offline comparisons, online analysis and the simulator agree
on what "significant" means. Every resampling takes a seed: a report is reproducible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps

_CHUNK = 2000
"""Resamples drawn at once: bounds memory at ``_CHUNK × n`` numbers."""


def bootstrap_mean_ci(
    values: Sequence[float] | NDArray[np.float64],
    *,
    resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (paired deltas: resample queries)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for start in range(0, resamples, _CHUNK):
        stop = min(resamples, start + _CHUNK)
        idx = rng.integers(0, x.size, size=(stop - start, x.size))
        means[start:stop] = x[idx].mean(axis=1)
    tail = (1 - level) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return (float(lo), float(hi))


def randomization_test(
    deltas: Sequence[float] | NDArray[np.float64], *, resamples: int = 10_000, seed: int = 0
) -> float:
    """Two-sided paired randomization (sign-flip) test of mean delta = 0.

    Under the null each query's two scores are exchangeable, so each delta's sign is a
    coin flip. p = (1 + #|flipped mean| ≥ |observed|) / (1 + resamples): never zero.
    """
    x = np.asarray(deltas, dtype=np.float64)
    if x.size == 0 or not np.any(x):
        return 1.0
    observed = abs(x.mean())
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, resamples, _CHUNK):
        n = min(resamples, start + _CHUNK) - start
        signs = rng.integers(0, 2, size=(n, x.size)) * 2 - 1
        flipped = np.abs((signs * x).mean(axis=1))
        hits += int(np.count_nonzero(flipped >= observed - 1e-12))
    return (1 + hits) / (1 + resamples)


def paired_ttest(deltas: Sequence[float] | NDArray[np.float64]) -> float:
    """Two-sided one-sample t-test of the deltas (= paired t-test of the two score lists)."""
    x = np.asarray(deltas, dtype=np.float64)
    if x.size < 2 or not np.any(x):
        return 1.0
    if np.all(x == x[0]):
        return 0.0  # every query moved by the same non-zero amount: no variance, certain
    return float(sps.ttest_1samp(x, 0.0).pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (same order as given), for several comparisons at once."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def sign_test(wins: int, losses: int) -> float:
    """Two-sided binomial sign test of wins vs losses (ties dropped), p = 0.5 under the null."""
    n = wins + losses
    if n == 0:
        return 1.0
    return float(sps.binomtest(wins, n, 0.5).pvalue)


def srm_chisquare(observed: Sequence[int], weights: Sequence[float]) -> float:
    """p-value of the observed bucket counts given the configured split (sample-ratio mismatch)."""
    total = sum(observed)
    if total == 0 or len(observed) < 2:
        return 1.0
    w = np.asarray(weights, dtype=np.float64)
    expected = w / w.sum() * total
    return float(sps.chisquare(np.asarray(observed, dtype=np.float64), expected).pvalue)


@dataclass(frozen=True, slots=True)
class RatioEstimate:
    """A ratio metric Σy/Σx over randomization units, with its delta-method variance."""

    value: float
    variance: float
    units: int

    def ci95(self) -> tuple[float, float]:
        half = 1.959964 * math.sqrt(max(self.variance, 0.0))
        return (self.value - half, self.value + half)


def ratio_estimate(y: NDArray[np.float64], x: NDArray[np.float64]) -> RatioEstimate:
    """Σy/Σx where y, x are per-unit sums (clicks and impressions of one user).

    Units, not impressions, are independent: a user is bucketed once and issues many
    queries. The delta method gives the variance of the ratio of two correlated means.
    """
    n = int(y.size)
    if n == 0 or x.sum() == 0:
        return RatioEstimate(math.nan, math.nan, n)
    mx, my = float(x.mean()), float(y.mean())
    r = my / mx
    if n < 2:
        return RatioEstimate(r, math.inf, n)
    vx, vy = float(x.var(ddof=1)), float(y.var(ddof=1))
    cxy = float(np.cov(x, y, ddof=1)[0, 1])
    var = (vy - 2 * r * cxy + r * r * vx) / (n * mx * mx)
    return RatioEstimate(r, var, n)


def difference_test(a: RatioEstimate, b: RatioEstimate) -> tuple[float, tuple[float, float], float]:
    """B − A, its 95% interval and the two-sided z-test p-value (independent groups)."""
    delta = b.value - a.value
    se = math.sqrt(a.variance + b.variance) if math.isfinite(a.variance + b.variance) else math.inf
    if not math.isfinite(delta) or se == math.inf:
        return (delta, (math.nan, math.nan), math.nan)
    if se == 0:
        return (delta, (delta, delta), 1.0 if delta == 0 else 0.0)
    p = float(2 * sps.norm.sf(abs(delta) / se))
    return (delta, (delta - 1.959964 * se, delta + 1.959964 * se), p)


def z_quantile(p: float) -> float:
    return float(sps.norm.ppf(p))
