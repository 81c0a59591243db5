"""verl's policy-loss registry: mode ``rfpp``, the plain clipped surrogate with the response mean
(docs/contract.md section 5)."""

from __future__ import annotations

from typing import Any, Optional

import torch

from verl_rfpp import losses, validation
from verl_rfpp.errors import RfppError
from verl_rfpp.plugin.hooks import Internal
from verl_rfpp.plugin.state import public

CORE_ALGOS = "verl.trainer.ppo.core_algos"
INTERNALS = (
    Internal(CORE_ALGOS, "POLICY_LOSS_REGISTRY", kind=dict),
    Internal(CORE_ALGOS, "register_policy_loss", ("name",)),
    Internal(CORE_ALGOS, "get_policy_loss_fn"),
)


@public
def rfpp_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = validation.RESPONSE_MEAN,
    config: Any = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl policy-loss mode ``rfpp``: the clipped surrogate of docs/contract.md section 5, response mean.

    Args:
        old_log_prob, log_prob, advantages, response_mask: ``(bs, response_length)``.
        loss_agg_mode: must be ``seq-mean-token-mean``.
        config: verl's ``ActorConfig`` (``clip_ratio``, ``clip_ratio_low``, ``clip_ratio_high``,
            ``global_batch_info``).
        rollout_is_weights: optional per-token importance weights, applied to valid tokens.

    Returns:
        ``(loss, metrics)`` with verl's ``actor/pg_clipfrac``, ``actor/ppo_kl`` and
        ``actor/pg_clipfrac_lower``. Unlike verl's ``vanilla`` there is no dual-clip.
    """
    if loss_agg_mode != validation.RESPONSE_MEAN:
        raise RfppError(
            f"verl_rfpp: policy loss 'rfpp' needs loss_agg_mode={validation.RESPONSE_MEAN}, got "
            f"{loss_agg_mode!r}. Fix: actor_rollout_ref.actor.loss_agg_mode={validation.RESPONSE_MEAN}"
        )
    clip = config.clip_ratio
    clip_low = config.clip_ratio_low if config.clip_ratio_low is not None else clip
    clip_high = config.clip_ratio_high if config.clip_ratio_high is not None else clip
    loss_mat, diagnostics = losses.clipped_surrogate(
        old_log_prob, log_prob, advantages, response_mask, clip_low, clip_high
    )
    if rollout_is_weights is not None:
        loss_mat = loss_mat * torch.where(response_mask.bool(), rollout_is_weights, 0.0)
    batch_info = dict(getattr(config, "global_batch_info", None) or {})
    loss = losses.response_mean(
        loss_mat,
        response_mask,
        global_batch_size=batch_info.get("global_batch_size"),
        dp_size=batch_info.get("dp_size") or 1,
    )
    metrics = {f"actor/{name}": value.detach().item() for name, value in diagnostics.items()}
    return loss, metrics


def register_policy_loss() -> None:
    """Register ``rfpp_policy_loss`` as ``policy_loss.loss_mode=rfpp`` (idempotent)."""
    from verl.trainer.ppo import core_algos

    core_algos.register_policy_loss(validation.POLICY_LOSS_MODE)(rfpp_policy_loss)


def unregister_policy_loss() -> None:
    from verl.trainer.ppo import core_algos

    core_algos.POLICY_LOSS_REGISTRY.pop(validation.POLICY_LOSS_MODE, None)


def registered_policy_loss() -> bool:
    """Whether ``policy_loss.loss_mode=rfpp`` resolves to ``rfpp_policy_loss``."""
    from verl.trainer.ppo import core_algos

    return core_algos.POLICY_LOSS_REGISTRY.get(validation.POLICY_LOSS_MODE) is rfpp_policy_loss
