"""k2 KL loss, mask-safe response mean and the clipped surrogate (docs/contract.md sections 3 and 5).

Plain tensors only; selection is boolean, so NaN or Inf at masked positions never reach a loss or
its gradient.
"""

from __future__ import annotations

from typing import Optional

import torch

# exp(20) ~ 4.9e8 keeps rho finite in float32; |log rho| > 20 never occurs in a sane update.
LOG_RATIO_BOUND = 20.0


def k2_penalty(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """``D_k2 = 0.5 * (logp_theta - logp_ref)^2`` per token (docs/contract.md section 3).

    Its gradient with respect to ``logp_theta`` is ``logp_theta - logp_ref``, whose expectation
    under the policy is the gradient of the reverse KL(pi_theta || pi_ref).
    """
    return 0.5 * (log_prob - ref_log_prob).square()


def response_mean(
    loss_mat: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    global_batch_size: Optional[float] = None,
    dp_size: int = 1,
) -> torch.Tensor:
    """Mean over valid tokens within each response, then over responses (docs/contract.md section 5).

    ``sum_i [L_i > 0] * (sum_t select(m, l)[i,t] / L_i) / n``, where ``n`` counts the responses
    with a valid token; with verl's global batch info (``global_batch_size`` responses over
    ``dp_size`` ranks whose gradients are averaged) ``n = global_batch_size / dp_size``, which makes
    the averaged gradient the global response mean.
    """
    valid = response_mask.bool()
    lengths = valid.sum(dim=-1)
    per_response = torch.where(valid, loss_mat, 0.0).sum(dim=-1) / lengths.clamp(min=1)
    responses = (lengths > 0).sum() if global_batch_size is None else global_batch_size / dp_size
    return per_response.sum() / responses


def responses_with_valid_tokens(response_mask: torch.Tensor) -> torch.Tensor:
    """The number of rows with at least one valid token: the responses of docs/contract.md
    sections 3 and 5 (``sum_i [L_i > 0]``), the denominator of the response mean.

    ``response_mask`` is ``(bs, response_length)``, padded or a jagged nested tensor (verl's
    no-padding layout). Rows with ``L_i = 0`` (verl v1's padding rows, empty or aborted
    responses) are not responses. Returns a 0-dim int64 tensor on the mask's device.
    """
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
    valid = response_mask.bool()
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
