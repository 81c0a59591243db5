"""verl's config validation: ``main_ppo`` refuses a config that breaks docs/contract.md
section 6, before Ray starts, and one whose estimator is not ours (section 8.2)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from verl_rfpp import validation
from verl_rfpp.plugin.hooks import Internal
from verl_rfpp.plugin.registries import ensure_active
from verl_rfpp.plugin.state import ORIGINALS, is_ours, marked

VERL_CONFIG = "verl.utils.config"
INTERNALS = (Internal(VERL_CONFIG, "validate_config", ("config",)),)

# The keys of verl's ppo_trainer config the rules read (docs/contract.md section 6); verl 0.9.0
# and 0.9.1 define each of them. One missing means verl renamed or moved it, and a rule would read
# its default instead of the run's value. (Keys verl only adds for some engines or trainers are
# read with their defaults: ``validation.ADDED_KEYS``, ``trainer.v1.sync.*``, ``async_training``.)
CONFIG_KEYS = (
    "algorithm.adv_estimator",
    "algorithm.gamma",
    "algorithm.use_kl_in_reward",
    "algorithm.kl_penalty",
    "algorithm.kl_ctrl.type",
    "algorithm.kl_ctrl.kl_coef",
    "algorithm.rollout_correction.rollout_rs",
    "algorithm.rollout_correction.bypass_mode",
    "algorithm.filter_groups.enable",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.kl_loss_type",
    "actor_rollout_ref.actor.kl_loss_coef",
    "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.policy_loss.loss_mode",
    "trainer.use_v1",
    "trainer.v1.trainer_mode",
    *(key for key in validation.PARALLEL_SIZE_KEYS if key not in validation.ADDED_KEYS),
)
_ABSENT = object()


def config_keys_problem(config: Any) -> Optional[str]:
    """Which ``CONFIG_KEYS`` the run ``config`` lacks, or ``None``."""
    from omegaconf import OmegaConf

    missing = [key for key in CONFIG_KEYS if OmegaConf.select(config, key, default=_ABSENT) is _ABSENT]
    if not missing:
        return None
    from verl_rfpp.plugin.versions import verl_version

    return (f"the run config lacks {', '.join(missing)}, which the contract's rules read (verl "
            f"{verl_version()} renamed or moved them?), so the config cannot be checked. Fix: use a "
            "tested verl or a verl-rfpp release that supports this verl")


def _validating(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def validate_config(config: Any, *args: Any, **kwargs: Any) -> Any:
        estimator = validation.estimator_of(config)
        if estimator is not None:
            ensure_active(estimator, config)
            validation.enforce(config)
        return original(config, *args, **kwargs)

    return marked(validate_config)


def wrap_validate_config() -> None:
    """Wrap ``verl.utils.config.validate_config`` and its re-export ``verl.utils.validate_config``.

    ``main_ppo`` binds the name at its import, after plugins load, so it sees the wrapper.
    """
    import verl.utils
    import verl.utils.config as verl_config

    current = verl_config.validate_config
    if is_ours(current):
        return
    ORIGINALS["validate_config"] = current
    wrapped = _validating(current)
    verl_config.validate_config = wrapped
    verl.utils.validate_config = wrapped


def unwrap_validate_config() -> None:
    import verl.utils
    import verl.utils.config as verl_config

    if "validate_config" in ORIGINALS:
        verl_config.validate_config = verl.utils.validate_config = ORIGINALS.pop("validate_config")


def validate_config_wrapped() -> bool:
    import verl.utils.config as verl_config

    return is_ours(verl_config.validate_config)
