"""Global masked normalization with population moments (docs/contract.md section 4).

    S     = {(rank, i, t) : m = 1},   N = |S|
    mu    = (1/N) * sum_S A
    var   = (1/N) * sum_S (A - mu)^2          (population variance, ddof = 0)
    A_hat = m * (A - mu) / sqrt(max(var, 1e-8))

This module imports nothing from verl: it works on plain tensors, with an optional
``torch.distributed`` process group when the caller has sharded the population itself.
"""

from __future__ import annotations

from typing import Any, NamedTuple, NoReturn, Optional

import torch
import torch.distributed as dist

from verl_rfpp.core import inputs, passes
from verl_rfpp.errors import EmptyPopulationError, NonFiniteError, RfppError, RfppInputError

VARIANCE_FLOOR = 1e-8

_EMPTY_MESSAGE = (
    "verl_rfpp: the normalization population is empty (no position with response_mask = 1 on any "
    "rank). docs/contract.md section 4 defines no mean or variance for N = 0. Check that the step batch "
    "holds at least one valid response token."
)
_NONFINITE_MESSAGE = (
    "verl_rfpp: a valid position (response_mask = 1) holds NaN or Inf, or values so large that "
    "their squares overflow. Only masked positions may hold garbage (docs/contract.md section 1); fix the "
    "reward or the mask upstream."
)


class NormalizationStats(NamedTuple):
    """Moments of one normalization call (docs/contract.md section 7); 0-dim tensors, no host sync.

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


def _all_reduce(values: torch.Tensor, process_group: Optional[dist.ProcessGroup]) -> torch.Tensor:
    if process_group is not None:
        dist.all_reduce(values, op=dist.ReduceOp.SUM, group=process_group)
    return values


check_response_mask = inputs.check_response_mask

_BAD_RANKS_MESSAGE = (
    "verl_rfpp: rank(s) {ranks} of the process group refused their input (that rank's own error says "
    "why); every rank of the group raises here, so that none waits in a collective "
    "(docs/contract.md section 4.5). Fix the input on that rank."
)


def _first_moments(first: torch.Tensor, process_group: Optional[dist.ProcessGroup]) -> torch.Tensor:
    """All-reduce ``[N, sum_S A]`` together with one flag per rank of the group, each rank's
    ``1`` meaning "my input was refused" (``refuse_on_every_rank``): the validity of every rank is
    agreed on in the collective that carries the first moments, at no extra collective. A rank
    that sees a flag raises ``RfppInputError`` naming the bad ranks (a device assert off the CPU)."""
    if process_group is None:
        return first
    flags = torch.zeros(dist.get_world_size(process_group), dtype=first.dtype, device=first.device)
    sums = _all_reduce(torch.cat([first, flags]), process_group)
    bad = sums[2:]
    if bad.device.type != "cpu":
        torch._assert_async(bad.sum() == 0, _BAD_RANKS_MESSAGE.format(ranks="(see the other ranks)"))
    elif bool(bad.any()):
        raise RfppInputError(_BAD_RANKS_MESSAGE.format(ranks=bad.nonzero().flatten().tolist()))
    return sums[:2]


def refuse_on_every_rank(error: BaseException, process_group: Optional[dist.ProcessGroup], *tensors: Any) -> NoReturn:
    """Raise ``error``, this rank's refusal of its input; with a process group, first join the
    first collective of ``_first_moments`` with this rank's flag set, so the other ranks raise too
    instead of waiting for the group's timeout (docs/contract.md section 4.5). The error raised here
    names this rank; an error that is not ours is re-raised as it is, after the collective."""
    if process_group is None:
        raise error
    rank, size = dist.get_rank(process_group), dist.get_world_size(process_group)
    sums = torch.zeros(2 + size, dtype=torch.float64, device=_collective_device(process_group, tensors))
    sums[2 + rank] = 1.0
    _all_reduce(sums, process_group)
    if not isinstance(error, RfppError):
        raise error
    message = f"{error} [rank {rank} of the {size} in the process group; every rank of the group raises]"
    try:
        annotated = type(error)(message)
    except TypeError:  # an error type with another constructor
        annotated = RfppInputError(message)
    raise annotated from error


def _collective_device(process_group: dist.ProcessGroup, tensors) -> torch.device:
    """The device the good ranks all-reduce on: their inputs' (docs/contract.md section 4.5). gloo
    reduces on the CPU; another backend on the first input tensor's device, NCCL on the first CUDA
    input (the current GPU when the refused input holds none)."""
    backend = str(dist.get_backend(process_group)).lower()
    if backend == "gloo":
        return torch.device("cpu")
    devices = [tensor.device for tensor in tensors if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta"]
    if "nccl" in backend:
        return next((device for device in devices if device.type == "cuda"),
                    torch.device("cuda", torch.cuda.current_device()))
    return devices[0] if devices else torch.device("cpu")


def normalize_with_sums(
    raw: torch.Tensor,
    valid: torch.Tensor,
    row_count: torch.Tensor,
    row_sum: torch.Tensor,
    *,
    process_group: Optional[dist.ProcessGroup] = None,
    variance_floor: float = VARIANCE_FLOOR,
) -> tuple[torch.Tensor, NormalizationStats]:
    """Normalize ``raw`` over ``valid`` from this rank's row ``L_i`` and ``sum_t A`` (docs/contract.md section 4).

    ``row_count`` and ``row_sum`` come from the pass that built or read ``raw``, so the first
    moment costs no pass of its own. ``raw`` is in its working precision (``compute_dtype``);
    masked positions may hold anything. Then, one all-reduce each when ``process_group`` is given
    (every rank enters all three, whatever it holds):
      1. ``N`` and ``sum_S A``  ->  ``mu`` (float64);
      2. one pass: ``c = A - mu`` on S, ``sum_S c`` and ``sum_S c^2``  ->
         ``var = sum c^2 / N - (sum c / N)^2`` (the second term corrects whatever rounding the
         subtraction of ``mu`` had: corrected two-pass), clamped at 0, floored at
         ``variance_floor``;
      3. one pass: the output and its sums for the metrics.
    """
    variance_floor = inputs.check_variance_floor(variance_floor)
    first = torch.stack([passes.total(row_count).to(torch.float64), passes.total(row_sum).to(torch.float64)])
    count, total = _first_moments(first, process_group).unbind()
    mean = total / _checked_count(count)
    centered_total, centered_squares = _all_reduce(passes.centered_sums(raw, valid, mean), process_group).unbind()
    shift, variance, inv_std = _variance(count, total, centered_total, centered_squares, variance_floor)
    normalized, output_sums = passes.write_normalized(raw, valid, mean + shift, inv_std)
    stats = _stats(count, mean + shift, variance, variance_floor, _all_reduce(output_sums, process_group))
    return normalized, stats


def normalize_rows(
    row_values: torch.Tensor,
    lengths: torch.Tensor,
    *,
    process_group: Optional[dist.ProcessGroup] = None,
    variance_floor: float = VARIANCE_FLOOR,
) -> tuple[torch.Tensor, NormalizationStats]:
    """docs/contract.md section 4 for an advantage constant along each row: ``A[i,t] = v_i`` on S.

    The population is still every valid token (row ``i`` counts ``L_i = lengths[i]`` times), so
    the moments are ``sum_i L_i v_i / N`` and ``sum_i L_i (v_i - mu)^2 / N``: the same steps and
    all-reduces as ``normalize_with_sums``, over ``(bs,)`` float64 vectors instead of ``(bs, T)``.
    Returns the normalized row values ``(v_i - mu) / sqrt(max(var, floor))`` (float64) and the
    stats; rows with ``L_i = 0`` are ignored whatever ``v_i`` holds.
    """
    variance_floor = inputs.check_variance_floor(variance_floor)
    weights = lengths.to(torch.float64)
    values = torch.where(weights > 0, row_values.to(torch.float64), 0.0)

    first = torch.stack([passes.total(weights), passes.total(weights * values)])
    count, total = _first_moments(first, process_group).unbind()
    mean = total / _checked_count(count)

    centered = values - mean
    second = torch.stack([passes.total(weights * centered), passes.total(weights * centered.square())])
    centered_total, centered_squares = _all_reduce(second, process_group).unbind()
    shift, variance, inv_std = _variance(count, total, centered_total, centered_squares, variance_floor)

    normalized_rows = (centered - shift) * inv_std
    third = torch.stack([passes.total(weights * normalized_rows), passes.total(weights * normalized_rows.square())])
    stats = _stats(count, mean + shift, variance, variance_floor, _all_reduce(third, process_group))
    return normalized_rows, stats


def _checked_count(count: torch.Tensor) -> torch.Tensor:
    """``N`` clamped at 1 after asserting ``N > 0`` on the device (no host sync on accelerators)."""
    try:
        torch._assert_async(count > 0, _EMPTY_MESSAGE)
    except RuntimeError as error:  # CPU tensors assert synchronously.
        raise EmptyPopulationError(_EMPTY_MESSAGE) from error
    return count.clamp(min=1.0)


def _assert_finite(finite: torch.Tensor, message: str = _NONFINITE_MESSAGE) -> None:
    """``NonFiniteError`` on the CPU, a device-side assert elsewhere (no host sync)."""
    if finite.device.type != "cpu":
        torch._assert_async(finite, message)
    elif not bool(finite.all()):
        raise NonFiniteError(message)


def _variance(count, total, centered_total, centered_squares, variance_floor):
    """``(shift, var, 1 / sqrt(max(var, floor)))`` from the second pass's sums (corrected form)."""
    _assert_finite(torch.isfinite(total) & torch.isfinite(centered_squares))
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
    """Global masked normalization of ``values`` over ``response_mask`` (docs/contract.md section 4).

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

    Inputs that require grad are read detached: the normalized advantage is a constant of the
    loss (docs/contract.md section 1.6).

    Raises:
        RfppInputError: an input outside docs/contract.md section 1.6; with a process group every
            rank raises when any rank's input is refused (section 4.5).
        EmptyPopulationError: no valid token on any rank (on accelerators, a device-side assert).
    """
    inputs.check_process_group(process_group)
    try:
        variance_floor = inputs.check_variance_floor(variance_floor)
        inputs.check_values_and_mask(values, response_mask, "values")
        raw = values.detach().to(passes.compute_dtype(values.dtype))
        valid, row_sum, row_count = passes.selected_row_sums(raw, response_mask)
    except Exception as error:
        refuse_on_every_rank(error, process_group, values, response_mask)
    normalized, stats = normalize_with_sums(
        raw, valid, row_count, row_sum, process_group=process_group, variance_floor=variance_floor
    )
    return normalized.to(values.dtype), stats
