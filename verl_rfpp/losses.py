"""The policy loss the plugin gives verl and its pieces (docs/contract.md sections 3 and 5).

On the training path: ``rfpp_policy_loss`` (verl's policy-loss registry entry ``rfpp``: the clipped
surrogate, ``clipped_surrogate``, reduced by the response mean, ``response_mean``) and
``responses_with_valid_tokens`` (the engine's response-count denominator, ``adapter/engine.py``).
Not on it: ``k2_penalty``; a run's k2 term is verl's own ``kl_penalty`` inside verl's ``ppo_loss``.
Plain tensors only, no verl; selection is boolean, so NaN or Inf at masked positions never reach a
loss or its gradient.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import torch

from verl_rfpp.catalog import RESPONSE_MEAN
from verl_rfpp.core import inputs
from verl_rfpp.errors import RfppError, RfppInputError

# exp(20) ~ 4.9e8 keeps rho finite in float32; |log rho| > 20 never occurs in a sane update.
LOG_RATIO_BOUND = 20.0


def k2_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """``D_k2 = 0.5 * (logp_theta - logp_ref)^2`` per token (docs/contract.md section 3). Used by
    ``verl_rfpp.bandit`` (its k2 loss and KL estimators) and by the tests, which hold it equal to verl's
    ``kl_penalty(..., "k2")``, the function training uses.

    Its gradient with respect to ``logp_theta`` is ``logp_theta - logp_ref``, whose expectation
    under the policy is the gradient of the reverse KL(pi_theta || pi_ref).
    """
    if not (isinstance(log_prob, torch.Tensor) and isinstance(ref_log_prob, torch.Tensor)
            and log_prob.shape == ref_log_prob.shape and log_prob.device == ref_log_prob.device
            and log_prob.dtype in inputs.VALUE_DTYPES and ref_log_prob.dtype in inputs.VALUE_DTYPES):
        raise RfppInputError(
            "verl_rfpp: k2_penalty needs log_prob and ref_log_prob as floating tensors "
            f"({inputs.dtype_names(inputs.VALUE_DTYPES)}) of one shape on one device; got "
            f"{inputs.describe(log_prob)} and {inputs.describe(ref_log_prob)}."
        )
    return 0.5 * (log_prob - ref_log_prob).square()


def response_mean(
    loss_mat: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    global_batch_size: Optional[float] = None,
    dp_size: int = 1,
) -> torch.Tensor:
    """Mean over valid tokens within each response, then over responses (docs/contract.md section 5.2).

    ``sum_i [L_i > 0] * (sum_t select(m, l)[i,t] / L_i) / (n / dp_size)``. With verl's global batch
    info, ``n = global_batch_size`` is the mini-batch's responses over all ``dp_size`` ranks, whose
    gradients are averaged: the average is the global response mean. Without it (one rank), ``n``
    counts this batch's responses. ``n`` is floored at 1 before it is split over the ranks (the
    divisor of verl's k2 term, ``global_batch_size / dp_size``, whatever ``n`` and ``dp_size``): a
    mini-batch without a valid token gives a zero loss (and gradient), not 0/0.
    """
    inputs.check_values_and_mask(loss_mat, response_mask, "loss_mat")
    ranks = check_dp_size(dp_size)
    valid = response_mask != 0
    lengths = valid.sum(dim=-1)
    per_response = torch.where(valid, loss_mat, 0.0).sum(dim=-1) / lengths.clamp(min=1)
    if global_batch_size is None:
        if ranks != 1:
            raise RfppInputError(
                f"verl_rfpp: response_mean got dp_size = {ranks} without global_batch_size; over several "
                "ranks the divisor is the responses of all ranks. Fix: pass global_batch_size (as verl's "
                "engine sets it) or dp_size=1 (docs/contract.md section 5.2)."
            )
        return per_response.sum() / (lengths > 0).sum().clamp(min=1)
    size = inputs.real_number(global_batch_size, "global_batch_size", "a number of responses > 0 (or None)",
                              "pass None to count the responses of this batch.")
    if not (math.isfinite(size) and size > 0):
        raise RfppInputError(
            f"verl_rfpp: response_mean needs global_batch_size > 0, got {global_batch_size!r}; pass the "
            "responses of the mini-batch over all ranks, or None (docs/contract.md section 5.2)."
        )
    return per_response.sum() / (max(size, 1.0) / ranks)


def check_dp_size(dp_size: Any) -> int:
    """The data-parallel size of docs/contract.md section 5.2: an integer >= 1, never read as 1."""
    ranks = inputs.real_number(dp_size, "dp_size", "an integer >= 1",
                               "pass the data-parallel size (1 on one rank).")
    if not (math.isfinite(ranks) and ranks >= 1 and ranks == int(ranks)):
        raise RfppInputError(
            f"verl_rfpp: dp_size = {dp_size!r}: expected an integer >= 1 (the number of data-parallel "
            "ranks whose gradients are averaged). Fix: pass the data-parallel size, 1 on one rank "
            "(docs/contract.md section 5.2)."
        )
    return int(ranks)


def responses_with_valid_tokens(response_mask: torch.Tensor) -> torch.Tensor:
    """The number of rows with at least one valid token: the responses of docs/contract.md
    sections 3 and 5 (``sum_i [L_i > 0]``), the denominator of the response mean.

    ``response_mask`` is ``(bs, response_length)``, padded or a jagged nested tensor (verl's
    no-padding layout). Rows with ``L_i = 0`` (verl v1's padding rows, empty or aborted
    responses) are not responses; a floating mask holding NaN is refused (``inputs.check_response_mask``).
    Returns a 0-dim int64 tensor on the mask's device.
    """
    inputs.check_response_mask(response_mask)
    if response_mask.is_nested:
        lengths = response_mask.offsets().diff()
        rows = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)
        valid = torch.zeros(lengths.numel(), dtype=torch.int64, device=lengths.device)
        valid.index_add_(0, rows, response_mask.values().bool().long())
        return (valid > 0).sum()
    return (response_mask.bool().sum(dim=-1) > 0).sum()


def clipped_surrogate(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Token loss ``l = max(-rho * A, -clip(rho, 1 - eps_low, 1 + eps_high) * A)``
    (docs/contract.md section 5).

    ``rho = exp(logp_theta - logp_old)`` (log ratio bounded at +-20 for float32 safety). Masked
    positions are selected out first and hold 0. Returns the ``(bs, response_length)`` loss matrix
    and 0-dim diagnostics over valid tokens: the fraction where the clip binds, the fraction where
    the lower bound binds (``rho < 1 - eps_low`` with ``A < 0``) and ``ppo_kl``, the mean of
    ``logp_old - logp_theta`` (the old/current policy drift, not the reference KL).
    """
    for name, tensor in (("log_prob", log_prob), ("advantages", advantages)):
        inputs.check_values_and_mask(tensor, response_mask, name)
    inputs.check_values_and_mask(old_log_prob, response_mask, "old_log_prob")
    valid = response_mask != 0
    log_ratio = torch.where(valid, log_prob - old_log_prob, 0.0).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    advantage = torch.where(valid, advantages, 0.0)
    ratio = torch.exp(log_ratio)
    unclipped = -advantage * ratio
    clipped = -advantage * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.where(valid, torch.maximum(unclipped, clipped), 0.0)
    count = valid.sum().clamp(min=1)
    binds = (clipped > unclipped) & valid
    diagnostics = {
        "pg_clipfrac": binds.sum() / count,
        "pg_clipfrac_lower": (binds & (ratio < 1.0)).sum() / count,
        "ppo_kl": (-log_ratio).sum() / count,
    }
    return loss, diagnostics


def rfpp_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = RESPONSE_MEAN,
    config: Any = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """verl policy-loss mode ``rfpp`` (the plugin registers it; training path): the clipped surrogate of
    docs/contract.md section 5, response mean.

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
    if loss_agg_mode != RESPONSE_MEAN:
        raise RfppError(
            f"verl_rfpp: policy loss 'rfpp' needs loss_agg_mode={RESPONSE_MEAN}, got "
            f"{loss_agg_mode!r}. Fix: actor_rollout_ref.actor.loss_agg_mode={RESPONSE_MEAN}"
        )
    clip = config.clip_ratio
    clip_low = config.clip_ratio_low if config.clip_ratio_low is not None else clip
    clip_high = config.clip_ratio_high if config.clip_ratio_high is not None else clip
    loss_mat, diagnostics = clipped_surrogate(
        old_log_prob, log_prob, advantages, response_mask, clip_low, clip_high
    )
    if rollout_is_weights is not None:
        loss_mat = loss_mat * torch.where(response_mask.bool(), rollout_is_weights, 0.0)
    batch_info = dict(getattr(config, "global_batch_info", None) or {})
    dp_size = batch_info.get("dp_size")
    loss = response_mean(
        loss_mat,
        response_mask,
        global_batch_size=batch_info.get("global_batch_size"),
        dp_size=1 if dp_size is None else dp_size,
    )
    metrics = {f"actor/{name}": value.detach().item() for name, value in diagnostics.items()}
    return loss, metrics
