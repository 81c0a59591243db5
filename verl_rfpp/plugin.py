"""The verl adapter: the only module that knows verl's internals (SPEC.md section 8).

verl imports this module through the ``verl.plugins`` entry point (``ep.load()`` imports and never
calls), in every process that imports verl. Importing it replaces verl's own
``reinforce_plus_plus`` and ``reinforce_plus_plus_baseline`` entries in
``core_algos.ADV_ESTIMATOR_REGISTRY``. verl swallows plugin load errors at DEBUG level, so every
failure here is logged at ERROR on logger ``verl_rfpp`` before it propagates.
"""

from __future__ import annotations

import logging
from importlib import metadata
from typing import Any, Callable

import torch

from verl_rfpp import estimators

logger = logging.getLogger("verl_rfpp")

SUPPORTED_VERL = ((0, 9, 1), (0, 10, 0))  # [lower, upper)
SUPPORTED_VERL_TEXT = ">=0.9.1,<0.10"


def compute_reinforce_plus_plus_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's registry entry ``reinforce_plus_plus`` (SPEC.md sections 2, 4, 9).

    Args:
        token_level_rewards: ``(bs, response_length)``.
        response_mask: ``(bs, response_length)``.
        config: the ``algorithm`` node (``gamma``); ``None`` means ``gamma = 1``.

    Returns:
        ``(advantages, returns)``, both ``(bs, response_length)``: ``A_hat`` and ``G``.
    """
    result = estimators.reinforce_plus_plus(token_level_rewards, response_mask, config)
    return result.advantages, result.returns


def compute_reinforce_plus_plus_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's registry entry ``reinforce_plus_plus_baseline`` (SPEC.md sections 3, 4, 9).

    Args:
        token_level_rewards: ``(bs, response_length)``.
        response_mask: ``(bs, response_length)``.
        config: the ``algorithm`` node (unused by the estimate itself).
        index: ``(bs,)`` uids, verl's ``data.non_tensor_batch["uid"]``.

    Returns:
        ``(advantages, returns)``, both ``(bs, response_length)``: ``A_hat`` and ``m * C``.
    """
    result = estimators.reinforce_plus_plus_baseline(token_level_rewards, response_mask, index)
    return result.advantages, result.returns


ESTIMATORS: dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {
    "reinforce_plus_plus": compute_reinforce_plus_plus_advantage,
    "reinforce_plus_plus_baseline": compute_reinforce_plus_plus_baseline_advantage,
}


def verl_version() -> str:
    """The installed verl distribution's version string."""
    return metadata.version("verl")


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def verl_supported(version: str) -> bool:
    """Whether ``version`` lies in the supported range ``SUPPORTED_VERL_TEXT``."""
    lower, upper = SUPPORTED_VERL
    return lower <= _release(version) < upper


def check_verl_version() -> None:
    """Log a WARNING when the installed verl is outside the supported range."""
    version = verl_version()
    if not verl_supported(version):
        logger.warning(
            "verl_rfpp supports verl %s but verl %s is installed; the registry, config keys and "
            "trainer paths it relies on may differ. Install a supported verl or run "
            "`verl-rfpp doctor`.",
            SUPPORTED_VERL_TEXT,
            version,
        )


def register_estimators() -> None:
    """Bind both names in ``core_algos.ADV_ESTIMATOR_REGISTRY`` to ours (idempotent).

    The registry is reached through the module attribute at call time (verl's own tests rebind
    the dict). ``register_adv_est`` refuses a name already bound, so the entries are assigned.
    """
    from verl.trainer.ppo import core_algos

    for name, function in ESTIMATORS.items():
        core_algos.ADV_ESTIMATOR_REGISTRY[name] = function


def registered_ours(name: str) -> bool:
    """Whether verl's registry resolves ``name`` to our estimator."""
    from verl.trainer.ppo import core_algos

    return core_algos.ADV_ESTIMATOR_REGISTRY.get(name) is ESTIMATORS[name]


def activate() -> None:
    """Everything the plugin does at import: version check, then registration."""
    try:
        check_verl_version()
        register_estimators()
    except Exception:
        logger.exception(
            "verl_rfpp could not register its estimators; verl's own reinforce_plus_plus and "
            "reinforce_plus_plus_baseline (which differ from the contract) would run instead. "
            "Run `verl-rfpp doctor`."
        )
        raise


activate()
