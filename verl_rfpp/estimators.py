"""REINFORCE++ and REINFORCE++-baseline advantages (docs/contract.md sections 2, 3, 9).

Both estimators take verl's keyword arguments and return ``(advantages, returns)``: the globally
normalized advantage ``A_hat`` and the raw advantage (``G`` or ``m * C``). This module imports
torch, numpy, pandas and omegaconf, never verl: it runs on plain tensors in notebooks and tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Real
from typing import Any, NamedTuple, Optional

import numpy as np
import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl_rfpp import catalog
from verl_rfpp.core import inputs, passes
from verl_rfpp.core.groups import group_centered_rewards, session_centered_rewards
from verl_rfpp.core.normalization import NormalizationStats, normalize_rows, normalize_with_sums, refuse_on_every_rank
from verl_rfpp.errors import NonFiniteError, RfppInputError


class EstimatorResult(NamedTuple):
    """What one estimator call computed: the normalized and raw advantages and their moments."""

    advantages: torch.Tensor
    returns: torch.Tensor
    stats: NormalizationStats


def gamma_of(config: Any) -> float:
    """The discount ``gamma`` of an algorithm config (docs/contract.md section 9).

    ``None`` means 1.0. Accepts an OmegaConf node or verl's ``AlgoConfig`` (both mappings), any
    other mapping, or any object with a ``gamma`` attribute; a config without ``gamma`` means 1.0.
    A number, string, sequence or tensor is not a config (``config=0.9`` is refused, not read as 1.0).
    """
    if config is None:
        return 1.0
    if isinstance(config, DictConfig):
        value = _omegaconf_gamma(config)
    elif isinstance(config, Mapping):
        value = config.get("gamma", 1.0)
    elif isinstance(config, (Real, str, bytes, list, tuple, torch.Tensor, np.ndarray)):
        raise RfppInputError(
            f"verl_rfpp: config = {inputs.describe(config)}: expected None, a mapping or an object with "
            "a `gamma` attribute (docs/contract.md section 9.2); pass config={'gamma': 1.0}."
        )
    else:
        value = getattr(config, "gamma", 1.0)
    return checked_gamma(1.0 if value is None else value)


def _omegaconf_gamma(config: DictConfig) -> Any:
    """``gamma`` of an OmegaConf node, refusing a mandatory ``???`` (``.get`` reads it as the default)
    and an interpolation that does not resolve (an unset ``${oc.env:...}``) with the fix."""
    fix = "set it, e.g. algorithm.gamma=1.0, the recipe's value (docs/contract.md section 9.2)."
    if OmegaConf.is_missing(config, "gamma"):
        raise RfppInputError(f"verl_rfpp: algorithm.gamma is '???' (a mandatory value never set); {fix}")
    try:
        return config.get("gamma", 1.0)
    except OmegaConfBaseException as error:
        raise RfppInputError(
            f"verl_rfpp: algorithm.gamma cannot be read: {error}. Fix: define what it refers to (the "
            f"environment variable or config key), or {fix}"
        ) from error


def checked_gamma(value: Any) -> float:
    """``gamma`` as a float in ``[0, 1]`` (docs/contract.md section 2.4), else ``RfppInputError``."""
    fix = "algorithm.gamma=1.0, the recipe's value (docs/contract.md section 2)."
    gamma = inputs.real_number(value, "algorithm.gamma", "a number in [0, 1]", fix)
    if not 0.0 <= gamma <= 1.0:
        raise RfppInputError(f"verl_rfpp: algorithm.gamma = {gamma} is outside [0, 1]; use {fix}")
    return gamma


def _check_rewards(token_level_rewards: Any, response_mask: Any) -> None:
    inputs.check_values_and_mask(token_level_rewards, response_mask, "token_level_rewards")


def discounted_returns(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    """KL-to-go returns ``G[i,t] = m[i,t] * sum_{u=t..T_i} gamma^(u-t) * r[i,u]``
    (docs/contract.md section 2).

    The sum runs over the selected rewards (masked positions hold anything and count as 0),
    straight through interior mask holes, discounting by position. In the rewards' dtype.
    """
    _check_rewards(token_level_rewards, response_mask)
    gamma = checked_gamma(gamma)
    rewards = token_level_rewards.detach().to(passes.compute_dtype(token_level_rewards.dtype))
    returns = passes.returns_pass(rewards, response_mask, gamma)[0]
    return returns.to(token_level_rewards.dtype)


def _overflow_message(row: Optional[int], dtype: torch.dtype) -> str:
    where = f" in row {row}" if row is not None else ""
    return (
        f"verl_rfpp: the raw advantage (the `returns` output){where} overflows {dtype} (|value| > "
        f"{torch.finfo(dtype).max:.4g}): the rewards are too large to be returned in {dtype}. "
        "Scale the rewards down, or pass them as float32/float64 (docs/contract.md section 1)."
    )


def _check_raw_fits(raw: torch.Tensor, stats: NormalizationStats) -> None:
    """REINFORCE++'s returns ``raw`` (already in the output dtype) must be finite, as the
    baseline's. A float32/float64 overflow is caught by the moments already; this is for
    bf16/fp16 outputs of float32 sums. On the CPU no pass is made unless the bound
    ``max |G| <= |mu| + sqrt(N) * std`` reaches the dtype's range; elsewhere a device assert."""
    if raw.dtype not in (torch.float16, torch.bfloat16):
        return
    if raw.device.type != "cpu":
        torch._assert_async(torch.isfinite(raw).all(), _overflow_message(None, raw.dtype))
        return
    bound = abs(float(stats.raw_mean)) + float(stats.valid_token_count) ** 0.5 * float(stats.raw_std)
    if bound < 0.5 * torch.finfo(raw.dtype).max:
        return
    bad_rows = (~torch.isfinite(raw)).any(dim=1).nonzero()
    if bad_rows.numel():
        raise NonFiniteError(_overflow_message(int(bad_rows[0]), raw.dtype))


def _check_centered_fits(centered: torch.Tensor, lengths: torch.Tensor, dtype: torch.dtype) -> None:
    """The baseline's ``C_i`` (float64, one per row) must be finite in the output ``dtype`` on
    every response: the same rule as REINFORCE++'s returns. ``(bs,)`` work only."""
    fits = torch.isfinite(centered.to(dtype)) | (lengths == 0)
    if centered.device.type != "cpu":
        torch._assert_async(fits.all(), _overflow_message(None, dtype))
    elif not bool(fits.all()):
        raise NonFiniteError(_overflow_message(int((~fits).nonzero()[0]), dtype))


@catalog.implements(catalog.REINFORCE_PLUS_PLUS)
def reinforce_plus_plus(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    *,
    process_group: Optional[dist.ProcessGroup] = None,
) -> EstimatorResult:
    """REINFORCE++ (docs/contract.md section 2): normalized KL-to-go returns.

    Args:
        token_level_rewards: ``(bs, response_length)``, ``R`` on the final valid token minus
            ``beta * d`` on valid tokens (verl applies the k1 shaping before the estimator).
        response_mask: ``(bs, response_length)``, ``m != 0`` marks valid tokens.
        config: anything ``gamma_of`` accepts.
        process_group: see ``masked_global_normalize``.

    Returns:
        ``EstimatorResult(A_hat, G, stats)`` in the rewards' dtype; rewards that require grad are
        read detached (the outputs are constants of the loss, docs/contract.md section 1.6).
    """
    inputs.check_process_group(process_group)
    try:
        _check_rewards(token_level_rewards, response_mask)
        gamma = gamma_of(config)
        rewards = token_level_rewards.detach().to(passes.compute_dtype(token_level_rewards.dtype))
        returns, valid, row_sum, row_count = passes.returns_pass(rewards, response_mask, gamma)
    except Exception as error:
        refuse_on_every_rank(error, process_group, token_level_rewards, response_mask)
    del rewards  # a bf16/fp16 input's float32 copy is dead: free it before the output is allocated
    advantages, stats = normalize_with_sums(returns, valid, row_count, row_sum, process_group=process_group)
    dtype = token_level_rewards.dtype
    returns = returns.to(dtype)
    _check_raw_fits(returns, stats)
    return EstimatorResult(advantages.to(dtype), returns, stats)


@catalog.implements(catalog.REINFORCE_PLUS_PLUS_BASELINE)
def reinforce_plus_plus_baseline(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    *,
    session: Any = None,
    process_group: Optional[dist.ProcessGroup] = None,
) -> EstimatorResult:
    """REINFORCE++-baseline (docs/contract.md section 3): normalized group-centred outcome rewards.

    ``R_i = sum_t select(m, r)``, ``C_i = R_i - mean_{j in g(i)} R_j``, ``A_raw = m * C_i``,
    then the global normalization of section 4, whose moments come from the per-row ``C_i``
    weighted by the row lengths (``normalize_rows``): two passes over ``(bs, T)`` in all, one
    that sums the rewards and one that writes both outputs.

    Args:
        token_level_rewards: ``(bs, response_length)``.
        response_mask: ``(bs, response_length)``, ``m != 0`` marks valid tokens.
        index: ``(bs,)`` uids (verl's ``uid``), any hashable values.
        session: ``None`` (every response its own session), or ``(bs,)`` session labels: the
            outputs of one agent-loop session share one, and each session counts once in its
            group's mean (docs/contract.md section 3.7).
        process_group: see ``masked_global_normalize``; groups must not span ranks.

    Returns:
        ``EstimatorResult(A_hat, m * C, stats)`` in the rewards' dtype; rewards that require grad
        are read detached (docs/contract.md section 1.6).
    """
    inputs.check_process_group(process_group)
    try:
        _check_rewards(token_level_rewards, response_mask)
        rewards = token_level_rewards.detach().to(passes.compute_dtype(token_level_rewards.dtype))
        valid, scores, lengths = passes.selected_row_sums(rewards, response_mask)
        centered = (group_centered_rewards(scores, lengths, index) if session is None
                    else session_centered_rewards(scores, lengths, index, session))
    except Exception as error:
        refuse_on_every_rank(error, process_group, token_level_rewards, response_mask)
    normalized_rows, stats = normalize_rows(centered, lengths, process_group=process_group)
    _check_centered_fits(centered, lengths, token_level_rewards.dtype)  # after NaN/Inf are refused
    advantages, raw = passes.broadcast_rows(valid, normalized_rows, centered, token_level_rewards.dtype)
    return EstimatorResult(advantages, raw, stats)


def compute_reinforce_plus_plus_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl signature of REINFORCE++ (docs/contract.md sections 2, 9); extra keywords are ignored.

    Returns ``(advantages, returns)``, both ``(bs, response_length)``: ``A_hat`` and ``G``.
    """
    result = reinforce_plus_plus(token_level_rewards, response_mask, config)
    return result.advantages, result.returns


def compute_reinforce_plus_plus_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    index: Any = None,
    session: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl signature of REINFORCE++-baseline (docs/contract.md sections 3, 9); extra keywords ignored.
    ``session``: optional session label per row (section 3.7).

    Returns ``(advantages, returns)``, both ``(bs, response_length)``: ``A_hat`` and ``m * C``.
    """
    result = reinforce_plus_plus_baseline(token_level_rewards, response_mask, index, session=session)
    return result.advantages, result.returns
