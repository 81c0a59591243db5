"""What both curves reports (``report``: the demo task, ``noisy``: the noisy-reward task) read from
a run's record and draw: a metric's series by step, the mean and sample std over seeds, and the
band plot (line: mean over seeds, band: min..max; color: estimator, solid: ours, dashed: verl's)."""

from __future__ import annotations

import math
import random
from typing import Optional

COLORS = {"reinforce_plus_plus_baseline": "tab:blue", "reinforce_plus_plus": "tab:red", "grpo": "tab:green"}


def series(record: dict, tag: str) -> list[float]:
    """The run's values of ``tag`` in step order."""
    return [value for _, value in sorted(record["metrics"].get(tag, []))]


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def std(values: list[float]) -> float:
    """Sample standard deviation (divisor n - 1); 0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    mu = mean(values)
    return math.sqrt(sum((v - mu) ** 2 for v in values) / (len(values) - 1))


BOOTSTRAP_RESAMPLES = 10_000


def sign_test(diffs: list[float]) -> float:
    """Exact two-sided sign test of "the median paired difference is 0": twice the binomial(n, 1/2)
    probability of a count as extreme as the smaller sign's, n the nonzero differences (1 if none)."""
    signs = [d for d in diffs if d != 0]
    n, k = len(signs), min(sum(d > 0 for d in signs), sum(d < 0 for d in signs))
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0


def bootstrap_interval(diffs: list[float], level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``diffs`` (resampled with replacement,
    BOOTSTRAP_RESAMPLES times, from a stream seeded by ``seed``)."""
    rng = random.Random(seed)
    means = sorted(mean(rng.choices(diffs, k=len(diffs))) for _ in range(BOOTSTRAP_RESAMPLES))
    tail = (1 - level) / 2
    return means[int(tail * (len(means) - 1))], means[int(round((1 - tail) * (len(means) - 1)))]


def paired(left: list[float], right: list[float]) -> dict:
    """``left - right`` seed by seed: the differences, their mean and sample std, how many are
    positive and negative, the exact sign test's p and the 95% bootstrap interval of their mean."""
    diffs = [a - b for a, b in zip(left, right, strict=True)]
    return {"per_seed": diffs, "diff_mean": mean(diffs), "diff_std": std(diffs),
            "positive": sum(d > 0 for d in diffs), "negative": sum(d < 0 for d in diffs),
            "sign_test_p": sign_test(diffs), "bootstrap_95": list(bootstrap_interval(diffs)) if diffs else []}


def seed_series(runs: list[dict], tag: str) -> list[list[float]]:
    """The non-empty series of ``tag``, one per run (seed)."""
    return [s for s in (series(r, tag) for r in runs) if s]


def band(axis, runs: list[dict], tag: str, label: str, alpha: Optional[float] = None) -> None:
    """Mean over seeds as a line, min..max as a band, over the steps every seed has; ``alpha`` of
    the band (default: 0.12 ours, 0.07 verl's)."""
    found = seed_series(runs, tag)
    if not found:
        return
    length = min(len(s) for s in found)
    steps = list(range(1, length + 1))
    columns = [[s[i] for s in found] for i in range(length)]
    method = runs[0]["method"]
    color = COLORS.get(method["estimator"], "tab:gray")
    axis.plot(steps, [mean(c) for c in columns], label=label, color=color, linestyle="-" if method["ours"] else "--")
    axis.fill_between(steps, [min(c) for c in columns], [max(c) for c in columns], color=color,
                      alpha=alpha if alpha is not None else 0.12 if method["ours"] else 0.07, linewidth=0)
