"""verl-rfpp: REINFORCE++ and REINFORCE++-baseline for verl, exactly as docs/contract.md says.

Importing this package has no side effect on verl. verl loads ``verl_rfpp.plugin`` through the
``verl.plugins`` entry point, and that module registers the estimators.
"""

from verl_rfpp.errors import EmptyPopulationError, NonFiniteError, RfppError, RfppInputError
from verl_rfpp.estimators import (
    EstimatorResult,
    compute_reinforce_plus_plus_advantage,
    compute_reinforce_plus_plus_baseline_advantage,
    discounted_returns,
    group_centered_rewards,
    reinforce_plus_plus,
    reinforce_plus_plus_baseline,
)
from verl_rfpp.normalization import VARIANCE_FLOOR, NormalizationStats, masked_global_normalize
from verl_rfpp.validation import ESTIMATOR_NAMES

__version__ = "0.1.0"

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
