"""Paired statistics for a handful of seeds, written from their definitions (no random resampling):
the per-seed differences, the exact paired sign-flip (permutation) test, the exact sign test, the
Student t interval of the mean difference, and the exact percentile bootstrap interval (every
resample enumerated), only to say how it compares with the t interval."""

from __future__ import annotations

import itertools
import math

from verl_rfpp.experiments.series import mean, std

LEVEL = 0.95


def sign_test(diffs: list[float]) -> float:
    """Exact two-sided sign test of "the median paired difference is 0": twice the binomial(n, 1/2)
    probability of a count as extreme as the smaller sign's, n the nonzero differences (1 if none)."""
    signs = [d for d in diffs if d != 0]
    n, k = len(signs), min(sum(d > 0 for d in signs), sum(d < 0 for d in signs))
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0


def sign_flip_test(diffs: list[float]) -> float:
    """Exact two-sided paired permutation test of "the differences are symmetric about 0": the
    share of the 2^n sign assignments of ``|diffs|`` whose sum is at least as far from 0 as the
    observed sum (the observed one included; 1 for no differences). Sums within a relative 1e-9 of
    the observed count as ties, so rounding cannot drop the observed assignment itself."""
    if not diffs:
        return 1.0
    sizes = [abs(d) for d in diffs]
    observed = abs(sum(diffs))
    tolerance = 1e-9 * max(sum(sizes), 1e-300)
    extreme = sum(abs(sum(s * x for s, x in zip(signs, sizes, strict=True))) >= observed - tolerance
                  for signs in itertools.product((1, -1), repeat=len(sizes)))
    return extreme / 2 ** len(sizes)


def t_cdf_two_sided(t: float, df: int) -> float:
    """P(|T| <= t) for Student's T with ``df`` degrees of freedom (t >= 0): the closed forms for
    integer df (Abramowitz and Stegun 26.7.3-4), with theta = atan(t / sqrt(df))."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df} must be at least 1")
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 0:  # sin(theta) (1 + c2/2 + 1*3 c2^2/(2*4) + ... up to c2^((df-2)/2))
        term, total = 1.0, 1.0
        for j in range(1, df // 2):
            term *= c2 * (2 * j - 1) / (2 * j)
            total += term
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    term, total = 1.0, 1.0  # (2/pi) (theta + sin cos (1 + 2/3 c2 + 2*4/(3*5) c2^2 + ... up to c2^((df-3)/2)))
    for j in range(1, (df - 1) // 2):
        term *= c2 * (2 * j) / (2 * j + 1)
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)


def t_quantile(level: float, df: int) -> float:
    """The t with P(|T| <= t) = ``level`` (the two-sided critical value), by bisection of
    ``t_cdf_two_sided`` to machine precision."""
    if not 0 < level < 1:
        raise ValueError(f"level {level} must be between 0 and 1")
    low, high = 0.0, 1.0
    while t_cdf_two_sided(high, df) < level:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if t_cdf_two_sided(middle, df) < level else (low, middle)
    return (low + high) / 2


def t_interval(diffs: list[float], level: float = LEVEL) -> list[float]:
    """The Student t interval of the mean difference, mean -+ t(level, n - 1) s / sqrt(n); empty
    for fewer than two differences."""
    n = len(diffs)
    if n < 2:
        return []
    half = t_quantile(level, n - 1) * std(diffs) / math.sqrt(n)
    return [mean(diffs) - half, mean(diffs) + half]


def paired(left: list[float], right: list[float]) -> dict:
    """``left - right`` seed by seed: the differences, their mean and sample std, how many are
    positive and negative, the exact sign-flip and sign tests' two-sided p and the 95% t interval."""
    diffs = [a - b for a, b in zip(left, right, strict=True)]
    return {"per_seed": diffs, "diff_mean": mean(diffs), "diff_std": std(diffs),
            "positive": sum(d > 0 for d in diffs), "negative": sum(d < 0 for d in diffs),
            "sign_flip_p": sign_flip_test(diffs), "sign_test_p": sign_test(diffs), "t_95": t_interval(diffs)}


def bootstrap_interval(diffs: list[float], level: float = LEVEL) -> list[float]:
    """The exact percentile bootstrap interval of the mean of ``diffs``: every resample of n with
    replacement, enumerated as the multiset of counts (k_1..k_n) with its multinomial probability
    n! / (k_1! .. k_n! n^n), mean sum k_i x_i / n; the bounds are the smallest means whose cumulative
    probability reaches (1 - level) / 2 and (1 + level) / 2. Empty for fewer than two differences."""
    n = len(diffs)
    if n < 2:
        return []
    means = []
    for chosen in itertools.combinations_with_replacement(range(n), n):
        counts = [0] * n
        for i in chosen:
            counts[i] += 1
        weight = math.factorial(n) / math.prod(math.factorial(k) for k in counts) / n ** n
        means.append((sum(k * x for k, x in zip(counts, diffs, strict=True)) / n, weight))
    means.sort()
    bounds, total, targets = [], 0.0, [(1 - level) / 2, (1 + level) / 2]
    for value, weight in means:
        total += weight
        while targets and total >= targets[0] - 1e-12:
            bounds.append(value)
            targets.pop(0)
    return bounds
