"""verl-rfpp: REINFORCE++ and REINFORCE++-baseline for verl, exactly as docs/contract.md says.

Importing this package has no side effect on verl. verl loads ``verl_rfpp.plugin`` through the
``verl.plugins`` entry point, and that module registers the estimators. The public names below
are imported on first use (PEP 562), so ``import verl_rfpp.cli.main`` alone loads neither torch nor
verl (``verl-rfpp recipe`` prints in well under a second).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_HOMES = {
    "verl_rfpp.errors": ("EmptyPopulationError", "NonFiniteError", "RfppError", "RfppInputError"),
    "verl_rfpp.estimators": ("EstimatorResult", "compute_reinforce_plus_plus_advantage",
                             "compute_reinforce_plus_plus_baseline_advantage", "discounted_returns",
                             "group_centered_rewards", "reinforce_plus_plus", "reinforce_plus_plus_baseline"),
    "verl_rfpp.core.normalization": ("VARIANCE_FLOOR", "NormalizationStats", "masked_global_normalize"),
    "verl_rfpp.catalog": ("ESTIMATOR_NAMES",),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    if name not in _HOME_OF:
        raise AttributeError(f"module 'verl_rfpp' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME_OF[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "ESTIMATOR_NAMES",
    "EmptyPopulationError",
    "EstimatorResult",
    "NonFiniteError",
    "NormalizationStats",
    "RfppError",
    "RfppInputError",
    "VARIANCE_FLOOR",
    "__version__",
    "compute_reinforce_plus_plus_advantage",
    "compute_reinforce_plus_plus_baseline_advantage",
    "discounted_returns",
    "group_centered_rewards",
    "masked_global_normalize",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
]
