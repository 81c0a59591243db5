"""The up-front config contract (docs/contract.md section 6): a verl config -> a list of violations,
and the recipes (section 6.1). The module users import; the code lives in ``verl_rfpp.rules``, by
concern, and this module re-exports its names.

Pure functions over OmegaConf: nothing here imports verl or torch. Only configs whose
``algorithm.adv_estimator`` names one of ours (``verl_rfpp.catalog``) are looked at; every other
verl run is untouched. The rules are one table, ``RULES`` (``verl_rfpp.rules.table``): each
``Rule`` has its contract id (6.2.x), the estimator families it applies to, the keys it reads
(each a ``Key`` declared once in ``verl_rfpp.rules.keys``: type, whether null is allowed, the value
verl uses when it is absent, the value a fix sets), what it accepts, why, and the function that
finds its violations. The type check (6.2.9), the keys ``check`` reads and docs/contract.md's 6.2
tables derive from them (the tables are held equal by a test).
"""

from __future__ import annotations

from verl_rfpp.rules.checks import enforce, kl_in_use, reads, violations, warnings_for
from verl_rfpp.rules.keys import (
    ADDED_KEYS,
    ADV_ESTIMATOR,
    ENGINE_ROLES,
    KL_COEF_FALLBACK,
    SEQUENCE_SPLITTING_KEY,
    TYPE_NAMES,
    USE_KL_IN_REWARD,
    USE_KL_LOSS,
    Key,
    UnreadableConfigError,
    sequence_splitting_keys,
)
from verl_rfpp.rules.names import (
    MisspeltEstimatorError,
    estimator_name,
    estimator_of,
    misspelt_estimator,
    near_miss,
    normalized,
    record_of,
)
from verl_rfpp.rules.recipes import RECIPES
from verl_rfpp.rules.table import (
    ALL,
    COMPLETENESS,
    K1_NAMES,
    K2_NAMES,
    RULES,
    WARNING_KEYS,
    Rule,
    clip_ratios,
    kl_in_use_keys,
    required_keys,
    rule,
    typed_keys,
)
from verl_rfpp.rules.violation import ConfigViolationError, Violation, fix_line, fix_overrides

__all__ = [
    "ADDED_KEYS", "ADV_ESTIMATOR", "ALL", "COMPLETENESS", "ENGINE_ROLES", "K1_NAMES", "K2_NAMES", "KL_COEF_FALLBACK",
    "RECIPES", "RULES", "SEQUENCE_SPLITTING_KEY", "TYPE_NAMES", "USE_KL_IN_REWARD", "USE_KL_LOSS", "WARNING_KEYS",
    "ConfigViolationError", "Key", "MisspeltEstimatorError", "Rule", "UnreadableConfigError", "Violation",
    "clip_ratios", "enforce", "estimator_name", "estimator_of", "fix_line", "fix_overrides", "kl_in_use",
    "kl_in_use_keys", "misspelt_estimator", "near_miss", "normalized", "reads", "record_of", "required_keys", "rule",
    "sequence_splitting_keys", "typed_keys", "violations", "warnings_for",
]
