"""Global masked normalization with population moments (SPEC.md section 4).

    S     = {(rank, i, t) : m = 1},   N = |S|
    mu    = (1/N) * sum_S A
    var   = (1/N) * sum_S (A - mu)^2          (population variance, ddof = 0)
    A_hat = m * (A - mu) / sqrt(max(var, 1e-8))

This module imports nothing from verl: it works on plain tensors, with an optional
``torch.distributed`` process group when the caller has sharded the population itself.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
import torch.distributed as dist

from verl_rfpp.errors import EmptyPopulationError, RfppInputError

VARIANCE_FLOOR = 1e-8

_EMPTY_MESSAGE = (
    "verl_rfpp: the normalization population is empty (no position with response_mask = 1 on any "
    "rank). SPEC.md section 4 defines no mean or variance for N = 0. Check that the step batch "
    "holds at least one valid response token."
)
_NONFINITE_MESSAGE = (
    "verl_rfpp: a valid position (response_mask = 1) holds NaN or Inf, or values so large that "
    "their squares overflow. Only masked positions may hold garbage (SPEC.md section 1); fix the "
    "reward or the mask upstream."
)


class NormalizationStats(NamedTuple):
    """Moments of one normalization call (SPEC.md section 7); 0-dim tensors, no host sync.

    raw_mean, raw_std: mean and population std of the raw values over valid tokens (float64).
    normalized_mean, normalized_std: the same, measured on the normalized output (float64).
    valid_token_count: N (float64, exact below 2**53).
    variance_floored: 1.0 when var < floor, i.e. the floor replaced the variance (float64).
    """

    raw_mean: torch.Tensor
    raw_std: torch.Tensor
    normalized_mean: torch.Tensor
    normalized_std: torch.Tensor
    valid_token_count: torch.Tensor
    variance_floored: torch.Tensor


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Working precision for an input dtype: float64 stays float64, everything else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def accumulate(values: torch.Tensor) -> torch.Tensor:
    """Sum of all elements as a float64 0-dim tensor.

    Each row (last dimension) is summed in the working precision with torch's cascade summation
    (error O(eps * log T) of the absolute row sum); rows and ranks are accumulated in float64.
    Casting the whole tensor to float64 first would cost two extra float32-sized buffers.
    """
    if values.dim() == 0:
        return values.to(torch.float64)
    return values.sum(dim=-1).to(torch.float64).sum()


def accumulate_squares(values: torch.Tensor) -> torch.Tensor:
    """Sum of squares of all elements as a float64 0-dim tensor.

    Row norms in the working precision (no squared temporary), squared and summed in float64.
    """
    if values.dim() == 0:
        return values.to(torch.float64).square()
    return torch.linalg.vector_norm(values, dim=-1).to(torch.float64).square().sum()


def _all_reduce(values: torch.Tensor, process_group: Optional[dist.ProcessGroup]) -> torch.Tensor:
    if process_group is not None:
        dist.all_reduce(values, op=dist.ReduceOp.SUM, group=process_group)
    return values


def _check_inputs(values: torch.Tensor, response_mask: torch.Tensor) -> None:
    if values.shape != response_mask.shape:
        raise RfppInputError(
            f"verl_rfpp: values have shape {tuple(values.shape)} but response_mask has shape "
            f"{tuple(response_mask.shape)}; both must be (bs, response_length)."
        )
    if not values.is_floating_point():
        raise RfppInputError(
            f"verl_rfpp: values must be a floating-point tensor, got {values.dtype}; cast it with .float()."
        )


def as_bool_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """``response_mask`` as booleans (``m != 0``); a bool tensor is returned as is."""
    return response_mask if response_mask.dtype == torch.bool else response_mask != 0


def normalize_selected(
    raw: torch.Tensor,
    valid: torch.Tensor,
    *,
    process_group: Optional[dist.ProcessGroup] = None,
    variance_floor: float = VARIANCE_FLOOR,
    out: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, NormalizationStats]:
    """Normalize ``raw`` whose masked positions are already exactly 0 (SPEC.md section 4).

    The estimators build their raw advantage by boolean selection, so they call this directly and
    skip a second selection pass. ``raw`` must be in its working precision (``compute_dtype``);
    ``valid`` is the boolean mask. The output has ``raw``'s dtype, exactly +0.0 at masked
    positions; it is written into ``out`` (a workspace of ``raw``'s shape and dtype that the caller
    no longer needs, saving one allocation) or into a new tensor.

    Two passes, one all-reduce each when ``process_group`` is given (every rank enters both,
    whatever it holds):
      1. N and sum_S A  ->  mu;
      2. c = A - mu on S, then sum_S c and sum_S c^2  ->  var = sum c^2 / N - (sum c / N)^2.
    The second term corrects the rounding of mu to the working precision (corrected two-pass
    algorithm); ``var`` is clamped at 0 and floored at ``variance_floor``. A third read of the
    output measures its mean and std for the metrics (a third all-reduce with a group).
    """
    invalid = ~valid

    first = torch.stack([valid.count_nonzero().to(torch.float64), accumulate(raw)])
    count, total = _all_reduce(first, process_group).unbind()
    mean = total / _checked_count(count)

    centered = torch.sub(raw, mean.to(raw.dtype), out=out)
    centered.masked_fill_(invalid, 0.0)
    second = torch.stack([accumulate(centered), accumulate_squares(centered)])
    centered_total, centered_squares = _all_reduce(second, process_group).unbind()
    shift, variance, inv_std = _variance(count, total, centered_total, centered_squares, variance_floor)

    normalized = centered.sub_(shift.to(raw.dtype)).mul_(inv_std.to(raw.dtype))
    normalized.masked_fill_(invalid, 0.0)

    third = torch.stack([accumulate(normalized), accumulate_squares(normalized)])
    stats = _stats(count, mean + shift, variance, variance_floor, _all_reduce(third, process_group))
    return normalized, stats


def normalize_row_constant(
    row_values: torch.Tensor,
    valid: torch.Tensor,
    dtype: torch.dtype,
    *,
    lengths: Optional[torch.Tensor] = None,
    process_group: Optional[dist.ProcessGroup] = None,
    variance_floor: float = VARIANCE_FLOOR,
    out: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, NormalizationStats]:
    """SPEC.md section 4 for an advantage that is constant along each row: ``A[i,t] = v_i`` on S.

    The population is still every valid token (row ``i`` counts ``L_i`` times), so the moments
    are ``sum_i L_i v_i / N`` and ``sum_i L_i (v_i - mu)^2 / N``: the same two passes and
    all-reduces as ``normalize_selected``, over ``(bs,)`` float64 vectors instead of the
    ``(bs, T)`` tensor. Output: ``where(m, (v_i - mu) / sqrt(max(var, floor)), 0)`` in ``dtype``,
    written into ``out`` when given. ``lengths`` (valid tokens per row) is counted from
    ``valid`` when not given; rows with ``L_i = 0`` are ignored whatever ``v_i`` holds.
    """
    if lengths is None:
        lengths = row_lengths(valid)
    weights = lengths.to(torch.float64)
    values = torch.where(weights > 0, row_values.to(torch.float64), 0.0)

    first = torch.stack([weights.sum(), (weights * values).sum()])
    count, total = _all_reduce(first, process_group).unbind()
    mean = total / _checked_count(count)

    centered = values - mean
    second = torch.stack([(weights * centered).sum(), (weights * centered.square()).sum()])
    centered_total, centered_squares = _all_reduce(second, process_group).unbind()
    shift, variance, inv_std = _variance(count, total, centered_total, centered_squares, variance_floor)

    normalized_rows = (centered - shift) * inv_std
    third = torch.stack([(weights * normalized_rows).sum(), (weights * normalized_rows.square()).sum()])
    stats = _stats(count, mean + shift, variance, variance_floor, _all_reduce(third, process_group))
    zero = torch.zeros((), dtype=dtype, device=valid.device)
    normalized = torch.where(valid, normalized_rows.to(dtype)[:, None], zero, out=out)
    return normalized, stats


def row_lengths(valid: torch.Tensor) -> torch.Tensor:
    """Valid tokens per row, ``L_i = sum_t m[i,t]`` (int32), from the boolean mask."""
    return valid.view(torch.uint8).sum(dim=-1, dtype=torch.int32)


def _checked_count(count: torch.Tensor) -> torch.Tensor:
    """``N`` clamped at 1 after asserting ``N > 0`` on the device (no host sync on accelerators)."""
    try:
        torch._assert_async(count > 0, _EMPTY_MESSAGE)
    except RuntimeError as error:  # CPU tensors assert synchronously.
        raise EmptyPopulationError(_EMPTY_MESSAGE) from error
    return count.clamp(min=1.0)


def _variance(count, total, centered_total, centered_squares, variance_floor):
    """``(shift, var, 1 / sqrt(max(var, floor)))`` from the second pass's sums (corrected form)."""
    torch._assert_async(torch.isfinite(total) & torch.isfinite(centered_squares), _NONFINITE_MESSAGE)
    safe_count = count.clamp(min=1.0)
    shift = centered_total / safe_count
    variance = (centered_squares / safe_count - shift.square()).clamp(min=0.0)
    return shift, variance, torch.rsqrt(torch.clamp(variance, min=variance_floor))


def _stats(count, raw_mean, variance, variance_floor, output_sums) -> NormalizationStats:
    out_total, out_squares = output_sums.unbind()
    safe_count = count.clamp(min=1.0)
    out_mean = out_total / safe_count
    return NormalizationStats(
        raw_mean=raw_mean,
        raw_std=variance.sqrt(),
        normalized_mean=out_mean,
        normalized_std=(out_squares / safe_count - out_mean.square()).clamp(min=0.0).sqrt(),
        valid_token_count=count,
        variance_floored=(variance < variance_floor).to(torch.float64),
    )


def masked_global_normalize(
    values: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    process_group: Optional[dist.ProcessGroup] = None,
    variance_floor: float = VARIANCE_FLOOR,
) -> tuple[torch.Tensor, NormalizationStats]:
    """Global masked normalization of ``values`` over ``response_mask`` (SPEC.md section 4).

    Args:
        values: ``(bs, response_length)`` floating tensor; masked positions may hold anything
            (NaN, Inf, 1e30): they are selected out, never multiplied.
        response_mask: ``(bs, response_length)``, bool or numeric; ``m != 0`` marks valid tokens.
        process_group: when given, the population is the union of every rank's valid tokens and
            every rank must call this function (also with no valid token, or zero rows). When
            ``None``, ``values`` is the whole population: nothing is inferred from
            ``torch.distributed.is_initialized()``.
        variance_floor: the floor of the variance (not an epsilon added to the std).

    Returns:
        ``(A_hat, stats)``: ``A_hat`` has ``values``' dtype and shape, exactly 0.0 where
        ``m = 0``; bf16/fp16 inputs are computed in float32. ``stats`` are 0-dim float64 tensors.

    Raises:
        EmptyPopulationError: no valid token on any rank (on accelerators, a device-side assert).
    """
    _check_inputs(values, response_mask)
    valid = as_bool_mask(response_mask)
    raw = torch.where(valid, values.to(compute_dtype(values.dtype)), 0.0)
    normalized, stats = normalize_selected(
        raw, valid, process_group=process_group, variance_floor=variance_floor
    )
    return normalized.to(values.dtype), stats
