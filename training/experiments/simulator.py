"""A cascade click model over judged collections: checks the online machinery and sizes experiments.

Real clicks are expensive and noisy; simulated ones from the qrels let us (1) check that
interleaving and A/B analysis pick the ranker the judgments say is better, and (2) estimate
how many impressions each needs before running anything live.

The cascade model (Craswell et al. 2008; click/stop parameters as in Hofmann et al. 2013):
the user reads the list top-down; at a document of relevance r in [0, 1] (grade / top grade)
they click with probability ``click(r)`` and, after a click, stop with ``stop(r)``.

Sizing: the A/B metrics' moments are exact under the model (:func:`exact_moments`);
interleaving's come from a simulated pilot grown until the effect is known to ±2.5%. The
normal approximation gives the impressions a two-sided α = 0.05 test needs for the requested
power, and ``reps`` simulated experiments at that size check it. Each A/B impression comes
from a different user, A/B's best case, so the ratio understates interleaving's advantage.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from core.settings import Settings
from core.types import doc_id_for
from online.book import Experiment
from online.interleaving import Team, interleave_rng, team_draft
from online.runtime import ExperimentRuntime
from training.datasets import BeirDataset
from training.evaluate import evaluate
from training.experiments.rankers_config import RankerCatalog
from training.experiments.significance import (
    RatioEstimate,
    difference_test,
    ratio_estimate,
    sign_test,
    z_quantile,
)

logger = logging.getLogger(__name__)

Runs = Mapping[str, Sequence[str]]
"""query id → ranked document external ids (best first)."""
Relevance = Mapping[str, Mapping[str, float]]
"""query id → document external id → relevance in [0, 1]."""

K = 10
AB_PRIMARY = "mrr_clicks"
LOWER_IS_BETTER = frozenset({"abandonment"})


@dataclass(frozen=True, slots=True)
class CascadeModel:
    name: str
    click: tuple[float, float]
    """P(click) at relevance 0 and at relevance 1."""
    stop: tuple[float, float]
    """P(stop | click) at relevance 0 and at relevance 1."""


PRESETS: dict[str, CascadeModel] = {
    "perfect": CascadeModel("perfect", (0.0, 1.0), (0.0, 0.0)),
    "navigational": CascadeModel("navigational", (0.05, 0.95), (0.2, 0.9)),
    "informational": CascadeModel("informational", (0.4, 0.9), (0.1, 0.5)),
}


@dataclass(frozen=True, slots=True)
class Lists:
    """Per-query top-k relevance, as arrays the simulation indexes by sampled query (or query, draw)."""

    relevance: NDArray[np.float64]
    valid: NDArray[np.bool_]
    """False where the list had no document at that position."""
    team_a: NDArray[np.bool_] | None = None
    """Interleaved lists only: True where team A contributed the document."""


def relevance_lists(runs: Runs, rel: Relevance, qids: Sequence[str], *, k: int = K) -> Lists:
    r = np.zeros((len(qids), k))
    valid = np.zeros((len(qids), k), dtype=bool)
    for i, q in enumerate(qids):
        docs = list(runs.get(q, ()))[:k]
        grades = rel.get(q, {})
        r[i, : len(docs)] = [grades.get(d, 0.0) for d in docs]
        valid[i, : len(docs)] = True
    return Lists(r, valid)


def interleaved_lists(
    runs_a: Runs, runs_b: Runs, rel: Relevance, qids: Sequence[str], *, draws: int, seed: int
) -> Lists:
    """``draws`` team-draft interleavings per query (the coin flips differ between impressions)."""
    rng = random.Random(seed)
    r = np.zeros((len(qids), draws, K))
    valid = np.zeros((len(qids), draws, K), dtype=bool)
    team_a = np.zeros((len(qids), draws, K), dtype=bool)
    for i, q in enumerate(qids):
        grades = rel.get(q, {})
        for j in range(draws):
            merged = team_draft(list(runs_a.get(q, ()))[:K], list(runs_b.get(q, ()))[:K], k=K, rng=rng)
            n = len(merged.doc_ids)
            r[i, j, :n] = [grades.get(str(d), 0.0) for d in merged.doc_ids]
            valid[i, j, :n] = True
            team_a[i, j, :n] = [t == "a" for t in merged.teams]
    return Lists(r, valid, team_a)


def simulate_clicks(
    relevance: NDArray[np.float64], valid: NDArray[np.bool_], model: CascadeModel, rng: np.random.Generator
) -> NDArray[np.bool_]:
    """Cascade clicks for n impressions at once: (n, k) relevance → (n, k) clicks."""
    n, k = relevance.shape
    p_click = model.click[0] + (model.click[1] - model.click[0]) * relevance
    p_stop = model.stop[0] + (model.stop[1] - model.stop[0]) * relevance
    reading = np.ones(n, dtype=bool)
    clicks = np.zeros((n, k), dtype=bool)
    for i in range(k):
        c = reading & valid[:, i] & (rng.random(n) < p_click[:, i])
        clicks[:, i] = c
        reading &= ~(c & (rng.random(n) < p_stop[:, i]))
    return clicks


def ab_metrics(clicks: NDArray[np.bool_], valid: NDArray[np.bool_]) -> dict[str, RatioEstimate]:
    """The analysis module's four A/B metrics, one impression = one user."""
    n_clicks: NDArray[np.float64] = np.asarray(clicks.sum(axis=1), dtype=np.float64)
    ones = np.ones(clicks.shape[0])
    has: NDArray[np.bool_] = np.asarray(clicks.any(axis=1))
    abandoned: NDArray[np.float64] = np.asarray(~has, dtype=np.float64)
    rr: NDArray[np.float64] = np.where(has, 1.0 / (np.argmax(clicks, axis=1) + 1), 0.0)
    return {
        "ctr": ratio_estimate(n_clicks, np.asarray(valid.sum(axis=1), dtype=np.float64)),
        "clicks_per_query": ratio_estimate(n_clicks, ones),
        "abandonment": ratio_estimate(abandoned, ones),
        "mrr_clicks": ratio_estimate(rr, ones),
    }


@dataclass(frozen=True, slots=True)
class AbOutcome:
    impressions: int
    metrics: dict[str, tuple[float, float, float]]
    """metric → (value A, value B, p-value of B − A)."""


@dataclass(frozen=True, slots=True)
class InterleavingOutcome:
    impressions: int
    wins_a: int
    wins_b: int
    ties: int
    p_value: float
    outcomes: NDArray[np.int8] = field(repr=False)
    """Per impression: +1 B won, −1 A won, 0 tie."""


def run_ab(
    a: Lists, b: Lists, *, impressions: int, model: CascadeModel, rng: np.random.Generator
) -> AbOutcome:
    """One simulated A/B test: half the impressions per arm, queries drawn uniformly."""
    half = impressions // 2
    per_arm = []
    for lists in (a, b):
        q = rng.integers(0, lists.relevance.shape[0], size=half)
        per_arm.append(
            ab_metrics(simulate_clicks(lists.relevance[q], lists.valid[q], model, rng), lists.valid[q])
        )
    metrics = {}
    for m in per_arm[0]:
        _, _, p = difference_test(per_arm[0][m], per_arm[1][m])
        metrics[m] = (per_arm[0][m].value, per_arm[1][m].value, p)
    return AbOutcome(2 * half, metrics)


def run_interleaving(
    lists: Lists, *, impressions: int, model: CascadeModel, rng: np.random.Generator
) -> InterleavingOutcome:
    """One simulated interleaving experiment; a click credits the team that placed the document."""
    assert lists.team_a is not None
    q = rng.integers(0, lists.relevance.shape[0], size=impressions)
    d = rng.integers(0, lists.relevance.shape[1], size=impressions)
    valid = lists.valid[q, d]
    clicks = simulate_clicks(lists.relevance[q, d], valid, model, rng)
    team_a = lists.team_a[q, d]
    a = (clicks & team_a).sum(axis=1)
    b = (clicks & ~team_a).sum(axis=1)
    out = np.sign(b - a).astype(np.int8)
    wins_a, wins_b = int(np.count_nonzero(out < 0)), int(np.count_nonzero(out > 0))
    return InterleavingOutcome(
        impressions, wins_a, wins_b, impressions - wins_a - wins_b, sign_test(wins_b, wins_a), out
    )


@dataclass(frozen=True, slots=True)
class Sizing:
    model: str
    queries: int
    power: float
    alpha: float
    interleaving_effect: float
    """Pilot mean of per-impression preference (+1 B, −1 A): > 0 favours B."""
    interleaving_impressions: int
    interleaving_power_check: float
    ab_effects: dict[str, float]
    """Pilot B − A per metric."""
    ab_impressions: dict[str, int]
    """Impressions (both arms together) per metric; −1 when the rankers do not differ on it."""
    ab_agrees: dict[str, bool]
    """Whether the metric moves in the direction interleaving prefers."""
    ab_power_check: float
    """Empirical power of the primary A/B metric (MRR of clicks) at its computed size."""

    def to_json(self) -> dict[str, Any]:
        def r(v: float) -> float:
            return round(v, 6)

        agreeing = [m for m, n in self.ab_impressions.items() if n > 0 and self.ab_agrees[m]]
        best = min(agreeing, key=lambda m: self.ab_impressions[m], default=None)

        return {
            "model": self.model,
            "queries": self.queries,
            "power": self.power,
            "alpha": self.alpha,
            "interleaving": {
                "effect": r(self.interleaving_effect),
                "impressions": self.interleaving_impressions,
                "empirical_power": r(self.interleaving_power_check),
            },
            "ab": {
                "primary": AB_PRIMARY,
                "effects": {k: r(v) for k, v in self.ab_effects.items()},
                "impressions": self.ab_impressions,
                "agrees_with_interleaving": self.ab_agrees,
                "empirical_power": r(self.ab_power_check),
            },
            "ratio_ab_over_interleaving": self._ratio(AB_PRIMARY),
            "ab_fewest": None if best is None else {"metric": best, "impressions": self.ab_impressions[best]},
            "ratio_ab_fewest_over_interleaving": None if best is None else self._ratio(best),
        }

    def _ratio(self, metric: str) -> float | None:
        n_ab, n_i = self.ab_impressions[metric], self.interleaving_impressions
        return round(n_ab / n_i, 3) if n_ab > 0 and n_i > 0 else None


def exact_moments(lists: Lists, model: CascadeModel) -> dict[str, tuple[float, float]]:
    """Exact mean and per-impression variance of each A/B metric under the cascade model.

    Small A/B effects are hard to estimate by simulation (a 0.006 difference in MRR of
    clicks needs millions of simulated impressions to pin down), but the cascade model
    has closed forms: the first click is at i with probability Π_{j<i}(1 − c_j)·c_i, and
    position i is read with probability Π_{j<i}(1 − c_j·s_j). Queries are drawn
    uniformly, so moments mix over queries. CTR (a ratio) gets its delta-method variance.
    """
    c = np.where(lists.valid, model.click[0] + (model.click[1] - model.click[0]) * lists.relevance, 0.0)
    s = model.stop[0] + (model.stop[1] - model.stop[0]) * lists.relevance
    q, k = c.shape
    no_click_before = np.cumprod(np.hstack([np.ones((q, 1)), 1 - c[:, :-1]]), axis=1)
    first = no_click_before * c
    ranks = np.arange(1, k + 1)
    rr1, rr2 = (first / ranks).sum(axis=1), (first / ranks**2).sum(axis=1)
    p0 = np.prod(1 - c, axis=1)
    # Clicks: E[C] = Σ r_i c_i; E[C²] = E[C] + 2 Σ_{i<j} r_i c_i (1 − s_i) Π_{i<l<j}(1 − c_l s_l) c_j.
    go_on = 1 - c * s
    read = np.cumprod(np.hstack([np.ones((q, 1)), go_on[:, :-1]]), axis=1)
    c1 = (read * c).sum(axis=1)
    pairs = np.zeros(q)
    for i in range(k):
        carry = read[:, i] * c[:, i] * (1 - s[:, i])
        for j in range(i + 1, k):
            pairs += carry * c[:, j]
            carry = carry * go_on[:, j]
    c2 = c1 + 2 * pairs
    n = lists.valid.sum(axis=1).astype(np.float64)

    def mix(m1: NDArray[np.float64], m2: NDArray[np.float64]) -> tuple[float, float]:
        mean = float(m1.mean())
        return mean, float(m2.mean() - mean**2)

    clicks_mean, clicks_var = mix(c1, c2)
    ratio = clicks_mean / float(n.mean()) if n.mean() > 0 else math.nan
    cov_cn = float((c1 * n).mean() - clicks_mean * n.mean())
    ctr_var = (clicks_var - 2 * ratio * cov_cn + ratio**2 * float(n.var())) / float(n.mean()) ** 2
    return {
        "ctr": (ratio, ctr_var),
        "clicks_per_query": (clicks_mean, clicks_var),
        "abandonment": mix(p0, p0),
        "mrr_clicks": mix(rr1, rr2),
    }


def _needed(effect: float, variance_per_unit: float, z: float) -> int:
    if effect == 0 or not math.isfinite(effect) or not math.isfinite(variance_per_unit):
        return -1
    return max(2, math.ceil((z / effect) ** 2 * variance_per_unit))


def size_experiment(
    runs_a: Runs,
    runs_b: Runs,
    rel: Relevance,
    *,
    model: CascadeModel,
    power: float = 0.8,
    alpha: float = 0.05,
    pilot: int = 200_000,
    max_pilot: int = 4_000_000,
    reps: int = 100,
    max_check_impressions: int = 2_000_000,
    draws: int = 32,
    seed: int = 0,
) -> Sizing:
    """Impressions each design needs to detect B vs A at ``alpha`` with ``power`` (see module doc)."""
    qids = sorted(set(runs_a) & set(runs_b) & set(rel))
    rng = np.random.default_rng(seed)
    la, lb = relevance_lists(runs_a, rel, qids), relevance_lists(runs_b, rel, qids)
    li = interleaved_lists(runs_a, runs_b, rel, qids, draws=draws, seed=seed)
    z = z_quantile(1 - alpha / 2) + z_quantile(power)

    # Grow the pilot until the effect is known to ±2.5% (n scales with 1/effect²), or max_pilot.
    total = total_sq = 0.0
    seen = 0
    while True:
        o = run_interleaving(li, impressions=pilot, model=model, rng=rng).outcomes.astype(np.float64)
        total, total_sq, seen = total + float(o.sum()), total_sq + float((o * o).sum()), seen + pilot
        effect_i = total / seen
        var_i = total_sq / seen - effect_i**2
        if seen >= max_pilot or (effect_i != 0 and math.sqrt(var_i / seen) <= 0.025 * abs(effect_i)):
            break
    n_i = _needed(effect_i, var_i, z)
    logger.info("interleaving pilot: %d impressions, effect %.5f", seen, effect_i)

    effects: dict[str, float] = {}
    needed_ab: dict[str, int] = {}
    moments_a, moments_b = exact_moments(la, model), exact_moments(lb, model)
    for m, (mean_a, var_a) in moments_a.items():
        mean_b, var_b = moments_b[m]
        effects[m] = mean_b - mean_a
        per_arm = _needed(effects[m], var_a + var_b, z)
        needed_ab[m] = -1 if per_arm < 0 else 2 * per_arm
    favours_b = effect_i > 0
    agrees = {m: ((e < 0) if m in LOWER_IS_BETTER else (e > 0)) == favours_b for m, e in effects.items()}

    def check_interleaving() -> float:
        if n_i < 0 or n_i > max_check_impressions:
            return math.nan
        ok = 0
        for _ in range(reps):
            out = run_interleaving(li, impressions=n_i, model=model, rng=rng)
            ok += out.p_value < alpha and (out.wins_b > out.wins_a) == favours_b
        return ok / reps

    def check_ab() -> float:
        n = needed_ab[AB_PRIMARY]
        if n < 0 or n > max_check_impressions:
            return math.nan
        ok = 0
        for _ in range(reps):
            va, vb, p = run_ab(la, lb, impressions=n, model=model, rng=rng).metrics[AB_PRIMARY]
            ok += p < alpha and (vb > va) == (effects[AB_PRIMARY] > 0)
        return ok / reps

    sizing = Sizing(
        model=model.name,
        queries=len(qids),
        power=power,
        alpha=alpha,
        interleaving_effect=effect_i,
        interleaving_impressions=n_i,
        interleaving_power_check=check_interleaving(),
        ab_effects=effects,
        ab_impressions=needed_ab,
        ab_agrees=agrees,
        ab_power_check=check_ab(),
    )
    logger.info("sizing (%s): interleaving %d, A/B %s impressions", model.name, n_i, needed_ab)
    return sizing


def ranked_lists(dataset_dir: Path, ranker: str, *, settings: Settings, k: int = K) -> dict[str, list[str]]:
    """Top-k external ids per judged query of a collection, from a named ranker (catalog or registry)."""
    config = RankerCatalog.load(settings.experiments.rankers_file).check_runnable(ranker)
    run = evaluate(dataset_dir, config.ranker, settings=settings, options=dict(config.options)).run
    return {q: ids[:k] for q, ids in run.items()}


def relevance_from_qrels(qrels: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, float]]:
    """Grades scaled by the collection's top grade (cranfield 1–4 → 0.25–1; cisi binary → 1)."""
    top = max((g for docs in qrels.values() for g in docs.values()), default=1) or 1
    return {q: {d: max(0, g) / top for d, g in docs.items()} for q, docs in qrels.items()}


def pooled_runs(
    a: str, b: str, datasets: Sequence[Path], *, settings: Settings
) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, dict[str, float]]]:
    """Both rankers' lists and relevance over several collections (query ids prefixed by collection)."""
    runs_a: dict[str, list[str]] = {}
    runs_b: dict[str, list[str]] = {}
    rel: dict[str, dict[str, float]] = {}
    for path in datasets:
        dataset = BeirDataset.open(path)
        prefix = f"{dataset.name}/"
        ra = ranked_lists(path, a, settings=settings)
        rb = ranked_lists(path, b, settings=settings)
        runs_a.update({prefix + q: v for q, v in ra.items()})
        runs_b.update({prefix + q: v for q, v in rb.items()})
        rel.update({prefix + q: v for q, v in relevance_from_qrels(dataset.qrels()).items()})
    return runs_a, runs_b, rel


def simulate_logs(
    runtime: ExperimentRuntime,
    experiment: Experiment,
    runs: Mapping[str, Runs],
    rel: Relevance,
    *,
    impressions: int,
    users: int,
    model: CascadeModel,
    seed: int = 0,
) -> int:
    """Drive a runtime with simulated users: bucketed, shown their variant's list, clicking by cascade.

    ``runs`` maps each variant's ranker name to its lists. Impressions and clicks go
    through the same runtime (and logs) as live traffic, so :func:`analysis.report`
    can be checked end to end. Returns the number of clicks logged.
    """
    rng = np.random.default_rng(seed)
    qids = sorted(rel)
    clicks_logged = 0
    for i in range(impressions):
        unit = f"sim-user-{int(rng.integers(0, users))}"
        assignment = experiment.assign(unit)
        if assignment is None:
            continue
        qid = qids[int(rng.integers(0, len(qids)))]
        impression_id = f"{seed:08x}{i:024x}"
        teams: tuple[Team, ...] = ()
        if assignment.mode == "interleave":
            merged = team_draft(
                list(runs[assignment.rankers[0]].get(qid, ()))[:K],
                list(runs[assignment.rankers[1]].get(qid, ()))[:K],
                k=K,
                rng=interleave_rng(impression_id),
            )
            shown = [str(d) for d in merged.doc_ids]
            teams = merged.teams
        else:
            shown = list(runs[assignment.rankers[0]].get(qid, ()))[:K]
        doc_ids = [doc_id_for(d) for d in shown]
        runtime.record_impression(
            query=qid,
            doc_ids=doc_ids,
            assignment=assignment,
            unit_id=unit,
            teams=teams,
            impression_id=impression_id,
        )
        grades = rel.get(qid, {})
        relevance = np.array([[grades.get(d, 0.0) for d in shown]])
        clicked = simulate_clicks(relevance, np.ones_like(relevance, dtype=bool), model, rng)[0]
        for position in np.flatnonzero(clicked) + 1:
            runtime.record_click(
                impression_id=impression_id, doc_id=doc_ids[position - 1], position=int(position)
            )
            clicks_logged += 1
    return clicks_logged
