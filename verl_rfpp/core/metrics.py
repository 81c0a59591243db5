"""Per-step statistics of the estimator (docs/contract.md section 7), waiting for verl's logger.

An estimator returns only ``(advantages, returns)``; its moments wait here until the next
``Tracking.log`` in the same process merges them under the ``rfpp/`` prefix. Names avoid the
substrings ``min``, ``max``, ``sum``, ``total`` and a trailing ``lr``, from which verl's v1
aggregator picks a reduction.
"""

from __future__ import annotations

from typing import Any

import torch

from verl_rfpp.core.normalization import NormalizationStats

PREFIX = "rfpp/"
NAMES = {
    "raw_mean": "raw_adv_mean",
    "raw_std": "raw_adv_std",
    "normalized_mean": "adv_mean",
    "normalized_std": "adv_std",
    "valid_token_count": "valid_tokens",
    "variance_floored": "var_floor_used",
}


class StepMetrics:
    """The latest estimator statistics, kept as tensors until drained (no host sync on record)."""

    def __init__(self) -> None:
        self._pending: dict[str, torch.Tensor] = {}

    def record(self, stats: NormalizationStats) -> None:
        """Keep the statistics of one estimator call; a later call of the same step replaces them."""
        self._pending = {PREFIX + NAMES[field]: value.detach() for field, value in stats._asdict().items()}

    def drain(self) -> dict[str, float]:
        """The pending metrics as floats, then forget them."""
        pending, self._pending = self._pending, {}
        return {name: float(value) for name, value in pending.items()}

    def merge_into(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with the pending metrics added (a new dict when there are any)."""
        return {**data, **self.drain()} if self._pending else data


STEP_METRICS = StepMetrics()
