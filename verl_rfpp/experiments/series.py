"""What both curves reports (``report``: the demo task, ``noisy``: the noisy-reward task) read from
a run's record and draw: a metric's series by step, the mean and sample std over seeds, and the
band plot (line: mean over seeds, band: min..max; color: estimator, solid: ours, dashed: verl's)."""

from __future__ import annotations

import math
from typing import Optional

from verl_rfpp import catalog

COLORS = {catalog.REINFORCE_PLUS_PLUS_BASELINE.name: "tab:blue", catalog.REINFORCE_PLUS_PLUS.name: "tab:red",
          "grpo": "tab:green"}


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
