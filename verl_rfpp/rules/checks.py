"""A config judged by the rules table (docs/contract.md section 6): its violations, its warnings
(6.4), the KL it uses (``check``'s OK line, 6.5), the refusal (``enforce``), and which overrides
the verdict reads (``reads``, for ``check``'s notes on overrides)."""

from __future__ import annotations

import logging

from omegaconf import DictConfig

from verl_rfpp.rules.keys import (
    ACTOR,
    ADV_ESTIMATOR,
    ENGINE_ROLES,
    FILTER_GROUPS,
    GAMMA,
    KL_COEF,
    KL_LOSS_COEF,
    REF,
    SEQUENCE_SPLITTING_KEY,
    USE_KL_IN_REWARD,
    USE_KL_LOSS,
    value_of,
)
from verl_rfpp.rules.names import estimator_of, record_of
from verl_rfpp.rules.table import COMPLETENESS, RULES, kl_in_use_keys, rule, typed_keys
from verl_rfpp.rules.violation import ConfigViolationError, Violation

logger = logging.getLogger("verl_rfpp")


def violations(config: DictConfig) -> list[Violation]:
    """Every rule of ``RULES`` the config breaks; empty for other estimators. The rules compare
    values: they see only a complete, well-typed config (6.2.9 first, alone when it fails).
    ``UnreadableConfigError`` when a key a rule reads does not resolve."""
    estimator = record_of(config)
    if estimator is None:
        return []
    incomplete = rule(COMPLETENESS).find(config, estimator, rule(COMPLETENESS))
    if incomplete:
        return incomplete
    return [
        violation
        for r in RULES if r.id != COMPLETENESS and estimator.family in r.families
        for violation in r.find(config, estimator, r)
    ]


def warnings_for(config: DictConfig) -> list[str]:
    """Legal but unusual settings (docs/contract.md section 6.4), each with what it means."""
    estimator = record_of(config)
    if estimator is None:
        return []
    notes = []
    gamma = value_of(config, GAMMA.name, 1.0)
    if not estimator.family.groups and gamma != 1.0:
        notes.append(
            f"{GAMMA.name} = {gamma}: returns are discounted by position, across mask holes "
            "too; the recipe uses 1.0 (docs/contract.md section 2)."
        )
    kl_in_reward = USE_KL_IN_REWARD.read(config)
    kl_loss = USE_KL_LOSS.read(config)
    coefficient, switch = kl_in_use_keys(estimator.family)
    if not kl_in_reward and not kl_loss:
        notes.append(
            "KL regularization is off entirely (no KL in the reward, no KL loss): the policy is "
            "free to drift from the reference model."
        )
    elif value_of(config, coefficient.name) == 0 and value_of(config, switch.name):
        what = "the k2 loss is computed" if estimator.family.groups else "the KL shaping is in place"
        notes.append(f"{coefficient.name} = 0: {what} but has no effect.")
    if FILTER_GROUPS.read(config):
        notes.append(
            f"{FILTER_GROUPS.name} = True: dropped groups leave the normalization "
            "population, so moments are over the kept groups only."
        )
    return notes


def kl_in_use(config: DictConfig) -> str:
    """Where and how an accepted config regularizes toward the reference model, for ``check``'s OK
    line (docs/contract.md section 6.5): the rules of 6.2.6 and 6.2.7 leave REINFORCE++ only k1 in
    the reward and the baseline only the k2 loss, each with its coefficient, or neither (``off``)."""
    if USE_KL_IN_REWARD.read(config):
        return f"k1 in the reward, coefficient {value_of(config, KL_COEF.name)}"
    if USE_KL_LOSS.read(config):
        return f"k2 loss, coefficient {value_of(config, KL_LOSS_COEF.name)}"
    return "off"


def enforce(config: DictConfig) -> None:
    """Raise ``ConfigViolationError`` listing every violation (``UnreadableConfigError`` for a key
    a rule reads that does not resolve); log each warning at WARNING."""
    estimator = estimator_of(config)
    if estimator is None:
        return
    found = violations(config)
    if found:
        raise ConfigViolationError(estimator, found)
    for note in warnings_for(config):
        logger.warning("verl_rfpp: %s", note)


def reads(key: str) -> bool:
    """Whether the verdict could read ``key`` or anything under or above it: a key of a rule or a
    warning (``typed_keys``), ``algorithm.adv_estimator``, a sequence-splitting key by name under
    ``ENGINE_ROLES``, a key of Hydra's or a config group (``/``, ``@``)."""
    key = key.lstrip("+")
    if key.startswith(("~", "hydra.")) or key == "hydra" or "/" in key or "@" in key:
        return True
    fixed = {ADV_ESTIMATOR.name, *typed_keys()}
    fixed.update(name.replace(ACTOR.name, REF.name, 1) for name in list(fixed) if name.startswith(ACTOR.name + "."))
    if any(key == name or name.startswith(key + ".") or key.startswith(name + ".") for name in fixed):
        return True
    return key.startswith(ENGINE_ROLES) and any(SEQUENCE_SPLITTING_KEY.match(part) for part in key.split("."))
