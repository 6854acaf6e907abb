"""The shared significance tests against exact enumeration, scipy and hand computation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats as sps

from training.experiments.significance import (
    bootstrap_mean_ci,
    difference_test,
    holm,
    paired_ttest,
    randomization_test,
    ratio_estimate,
    sign_test,
    srm_chisquare,
)

DELTAS = [0.12, -0.03, 0.08, 0.0, 0.21, 0.05, -0.02, 0.09, 0.15, -0.06]


def exact_randomization_p(x: list[float]) -> float:
    observed = abs(np.mean(x))
    flips = [
        abs(np.mean([s * v for s, v in zip(signs, x, strict=True)]))
        for signs in itertools.product((1, -1), repeat=len(x))
    ]
    return sum(f >= observed - 1e-12 for f in flips) / len(flips)


def test_randomization_matches_exact_enumeration() -> None:
    exact = exact_randomization_p(DELTAS)
    assert randomization_test(DELTAS, resamples=20_000, seed=3) == pytest.approx(exact, abs=0.01)
    assert randomization_test([0.0] * 5) == 1.0


def test_paired_ttest_is_scipys_ttest_rel() -> None:
    a = np.array([0.3, 0.5, 0.2, 0.7, 0.4, 0.6, 0.1, 0.5, 0.3, 0.4])
    b = a + np.array(DELTAS)
    assert paired_ttest(b - a) == pytest.approx(sps.ttest_rel(b, a).pvalue, rel=1e-9)
    assert paired_ttest([0.1] * 6) == 0.0  # the same gain on every query


def test_bootstrap_interval_brackets_the_mean_and_shrinks_with_n() -> None:
    lo, hi = bootstrap_mean_ci(DELTAS, resamples=4000, seed=1)
    assert lo < np.mean(DELTAS) < hi
    # Normal-theory half-width for comparison: within 25%.
    half = 1.96 * np.std(DELTAS, ddof=0) / np.sqrt(len(DELTAS))
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.25)
    lo4, hi4 = bootstrap_mean_ci(DELTAS * 4, resamples=4000, seed=1)
    assert (hi4 - lo4) == pytest.approx((hi - lo) / 2, rel=0.2)


def test_holm_by_hand() -> None:
    # Sorted 0.01, 0.02, 0.04 -> x3, x2, x1 = 0.03, 0.04, 0.04 (monotone), back in input order.
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_sign_and_srm_tests() -> None:
    assert sign_test(15, 5) == pytest.approx(sps.binomtest(15, 20, 0.5).pvalue)
    assert sign_test(0, 0) == 1.0
    assert srm_chisquare([5000, 5000], [1, 1]) == pytest.approx(1.0)
    assert srm_chisquare([5200, 4800], [0.5, 0.5]) < 0.001
    assert srm_chisquare([7000, 3000], [0.7, 0.3]) == pytest.approx(1.0)


def test_ratio_delta_method_matches_a_plain_mean_when_denominators_are_one() -> None:
    rng = np.random.default_rng(0)
    y = rng.random(500)
    est = ratio_estimate(y, np.ones(500))
    assert est.value == pytest.approx(y.mean())
    assert est.variance == pytest.approx(y.var(ddof=1) / 500)
    other = ratio_estimate(y + 0.1, np.ones(500))
    delta, (lo, hi), p = difference_test(est, other)
    assert delta == pytest.approx(0.1)
    assert lo < 0.1 < hi and p < 1e-6
