"""verl's config validation: ``main_ppo`` refuses a config that breaks docs/contract.md
section 6, before Ray starts, one whose estimator is not ours (section 8.2), and one whose
estimator is ours misspelt. Any other config, and one this wrapper cannot read (not an OmegaConf
node, an ``adv_estimator`` that does not resolve), goes to verl's own validation untouched."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from omegaconf import DictConfig

from verl_rfpp import validation
from verl_rfpp.patching import Internal, marked
from verl_rfpp.plugin.registries import ensure_active

VERL_CONFIG = "verl.utils.config"
INTERNALS = (Internal(VERL_CONFIG, "validate_config", ("config",)),)
# bind it by name: verl.utils re-exports it; main_ppo & co. bind it at import, after plugins load
VALIDATE_CONFIG_IMPORTERS = ("verl.utils", "verl.trainer.main_ppo", "verl.trainer.main_ppo_v0",
                             "verl.experimental.one_step_off_policy.main_ppo")

def _validating(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def validate_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        estimator = validation.estimator_of(config)
        if estimator is not None:
            ensure_active(estimator, config)
            validation.enforce(config)
        else:
            misspelt = _misspelt_estimator(config)
            if misspelt is not None:
                raise misspelt
        return original(config, *args, **kwargs)

    return marked(validate_config)


def _misspelt_estimator(config: Any) -> Optional[validation.MisspeltEstimatorError]:
    """The did-you-mean refusal of ``verl-rfpp check`` for a readable ``adv_estimator`` that verl
    does not know and that is one of ours misspelt; ``None`` otherwise."""
    if not isinstance(config, DictConfig):
        return None
    try:
        name = validation.estimator_name(config)
    except validation.UnreadableConfigError:
        return None
    misspelt = validation.misspelt_estimator(name)
    return None if misspelt is None or registered_in_verl(name) else misspelt


def registered_in_verl(name: Any) -> bool:
    """Whether verl's advantage registry holds ``name`` (another plugin may own a near name)."""
    from verl.trainer.ppo import core_algos

    return isinstance(name, str) and name in core_algos.ADV_ESTIMATOR_REGISTRY

