"""The passes over ``(bs, T)`` tensors that the estimators and the normalization make.

Each function is one pass of docs/contract.md sections 2-4 and has two implementations with one contract:
on CPU tensors, a fused numba kernel (``verl_rfpp.core.kernels``: one read of the inputs, float64
accumulators); on any other device, torch operations. ``VERL_RFPP_CPU_KERNELS=0`` selects the
torch operations on the CPU too (for platforms without numba, and for the tests that check both).

Masks: ``response_mask`` may be bool or numeric (``m != 0`` is valid); the functions that read it
first return ``valid`` (bool) for the passes after them. Values: floating, in their working
precision (``compute_dtype``); masked positions may hold anything, every pass selects.
Row results are ``(bs,)`` float64 sums and int64 counts. The torch operations never sync with
the host (the kernels work on host memory, where there is nothing to sync).
"""

from __future__ import annotations

import os

import torch

from verl_rfpp.errors import RfppInputError

CPU_KERNELS_VARIABLE = "VERL_RFPP_CPU_KERNELS"
_BLOCK = 128  # positions per chunk of the torch gamma < 1 recurrence

# Mask dtypes the kernels read directly (numpy has them); other masks become bool first.
_KERNEL_MASK_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float32, torch.float64)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Working precision for an input dtype: float64 stays float64, everything else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def as_bool_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """``response_mask`` as booleans (``m != 0``); a bool tensor is returned as is."""
    return response_mask if response_mask.dtype == torch.bool else response_mask != 0


def uses_cpu_kernels(*tensors: torch.Tensor) -> bool:
    """Whether the passes over these tensors run the numba kernels (all on the CPU, not disabled)."""
    setting = os.environ.get(CPU_KERNELS_VARIABLE, "1")
    if setting not in ("0", "1"):
        raise RfppInputError(
            f"verl_rfpp: {CPU_KERNELS_VARIABLE}={setting!r}; use 1 (numba kernels on the CPU, the "
            "default) or 0 (torch operations everywhere)."
        )
    return setting == "1" and all(tensor.device.type == "cpu" for tensor in tensors)


def selected_row_sums(values: torch.Tensor, response_mask: torch.Tensor):
    """``(valid, row_sum, row_count)``: ``sum_t select(m, values)`` and ``L_i`` per row."""
    if uses_cpu_kernels(values, response_mask):
        mask, valid, store = _kernel_masks(response_mask)
        row_sum, row_count = _row_vectors(values)
        _run_kernel("row_sums_of_selected", values.shape, _array(values), mask, store, _array(valid),
                    row_sum.numpy(), row_count.numpy())
        return valid, row_sum, row_count
    valid = as_bool_mask(response_mask)
    selected = values.masked_fill(~valid, 0.0)
    return valid, _row_sums(selected), row_lengths(valid)


def returns_pass(rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float):
    """``(returns, valid, row_sum, row_count)`` with the KL-to-go returns of docs/contract.md section 2,
    ``G[i,t] = m[i,t] * sum_{u=t..T_i} gamma^(u-t) * select(m, r)[i,u]``, and per row the sum of
    ``G`` over valid positions and ``L_i``."""
    returns = torch.empty_like(rewards)
    if uses_cpu_kernels(rewards, response_mask):
        mask, valid, store = _kernel_masks(response_mask)
        row_sum, row_count = _row_vectors(rewards)
        _run_kernel("suffix_sums", rewards.shape, _array(rewards), mask, float(gamma), store, _array(valid),
                    returns.numpy(), row_sum.numpy(), row_count.numpy())
        return returns, valid, row_sum, row_count
    valid = as_bool_mask(response_mask)
    if returns.shape[1] > 0:
        selected = rewards.masked_fill(~valid, 0.0)
        exact = _suffix_sums(selected, gamma) if gamma == 1.0 else _blocked_discounted_sums(selected, gamma)
        del selected
        returns.copy_(exact)  # rounded once, to the working precision, as the kernels store it
        del exact
        returns.masked_fill_(~valid, 0.0)
    return returns, valid, _row_sums(returns), row_lengths(valid)


def centered_sums(values: torch.Tensor, valid: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """``[sum_S c, sum_S c^2]`` (float64) with ``c = values - mean`` on the valid positions ``S``.

    ``mean`` is a float64 0-dim tensor; as in the kernels, ``c`` is formed and summed in float64
    (a float32 accumulator drops the small deviations next to a large one).
    """
    if uses_cpu_kernels(values, valid):
        row_sum, row_squares = _row_vectors(values, torch.float64)
        _run_kernel("centered_row_sums", values.shape, _array(values), _array(valid), float(mean),
                    row_sum.numpy(), row_squares.numpy())
        return _totals(row_sum, row_squares)
    centered = torch.where(valid, values.to(torch.float64) - mean, 0.0)
    return _totals(_row_sums(centered), _row_squares(centered))


def write_normalized(values: torch.Tensor, valid: torch.Tensor, mean: torch.Tensor, scale: torch.Tensor):
    """``(out, [sum out, sum out^2])``: ``out = where(m, (values - mean) * scale, 0)`` in ``values``'
    dtype, with the float64 sums of the stored output for the metrics (0-dim ``mean``, ``scale``)."""
    out = torch.empty_like(values)
    if uses_cpu_kernels(values, valid):
        row_sum, row_squares = _row_vectors(values, torch.float64)
        _run_kernel("normalize", values.shape, _array(values), _array(valid), float(mean), float(scale),
                    out.numpy(), row_sum.numpy(), row_squares.numpy())
        return out, _totals(row_sum, row_squares)
    normalized = _centered(values, valid, mean, out).mul_(scale.to(values.dtype))
    return normalized, _totals(_row_sums(normalized), _row_squares(normalized))


def broadcast_rows(valid: torch.Tensor, first: torch.Tensor, second: torch.Tensor, dtype: torch.dtype):
    """``where(m, v[:, None], 0)`` for the two ``(bs,)`` row constants ``first`` and ``second``,
    as ``(bs, T)`` tensors in ``dtype``, from one pass over the mask."""
    first_out = torch.empty(valid.shape, dtype=dtype, device=valid.device)
    second_out = torch.empty_like(first_out)
    if dtype in (torch.float32, torch.float64) and uses_cpu_kernels(valid, first, second):
        _run_kernel("broadcast_row_values", valid.shape, _array(valid), _array(first.to(dtype)),
                    _array(second.to(dtype)), first_out.numpy(), second_out.numpy())
        return first_out, second_out
    zero = torch.zeros((), dtype=dtype, device=valid.device)
    torch.where(valid, first.to(dtype)[:, None], zero, out=first_out)
    torch.where(valid, second.to(dtype)[:, None], zero, out=second_out)
    return first_out, second_out


def total(row_values: torch.Tensor) -> torch.Tensor:
    """Sum of a ``(bs,)`` vector as a 0-dim tensor, in row order on the CPU (a sequential sum):
    rows that hold 0, such as padding rows, never change the result, not even in the last bit."""
    if row_values.device.type != "cpu" or row_values.numel() == 0:
        return row_values.sum()
    return row_values.cumsum(dim=0)[-1]


def row_lengths(valid: torch.Tensor) -> torch.Tensor:
    """Valid tokens per row, ``L_i = sum_t m[i,t]`` (int64), from the boolean mask."""
    return valid.count_nonzero(dim=-1)


def _run_kernel(name: str, shape: torch.Size, *arrays) -> None:
    """Run ``verl_rfpp.core.kernels.<name>`` over the rows of ``shape`` on torch's thread count."""
    try:
        from verl_rfpp.core import kernels  # numba is imported on first use, not in every verl process
    except Exception as error:  # ImportError, or OSError/RuntimeError when llvmlite cannot load
        raise RfppInputError(
            f"verl_rfpp: the CPU kernels need numba, whose import failed with {type(error).__name__}: "
            f"{error}; install a working numba (`pip install numba`), or set {CPU_KERNELS_VARIABLE}=0 "
            "to use torch operations on the CPU (slower)."
        ) from error
    kernels.run_parallel(getattr(kernels, name), shape, torch.get_num_threads(), *arrays)


def _totals(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """``[total(first), total(second)]``: two per-row vectors reduced to a float64 pair."""
    return torch.stack([total(first), total(second)])


def _array(tensor: torch.Tensor):
    """A numpy view of a contiguous CPU tensor (bool as uint8)."""
    tensor = tensor.detach().contiguous()
    return (tensor.view(torch.uint8) if tensor.dtype == torch.bool else tensor).numpy()


def _kernel_masks(response_mask: torch.Tensor):
    """``(mask array, valid, store_valid)``: a bool mask is ``valid`` itself; a numeric one is read
    by the kernel, which stores ``valid`` as it goes."""
    if response_mask.dtype not in _KERNEL_MASK_DTYPES:
        response_mask = as_bool_mask(response_mask)
    if response_mask.dtype == torch.bool:
        valid = response_mask.contiguous()
        return _array(valid), valid, False
    valid = torch.empty(response_mask.shape, dtype=torch.bool)
    return _array(response_mask), valid, True


def _row_vectors(values: torch.Tensor, second_dtype: torch.dtype = torch.int64):
    """Two ``(bs,)`` CPU vectors for a kernel's per-row results: float64 and ``second_dtype``."""
    rows = values.shape[0]
    return torch.empty(rows, dtype=torch.float64), torch.empty(rows, dtype=second_dtype)


def _row_sums(values: torch.Tensor) -> torch.Tensor:
    """Row sums accumulated in float64 (docs/contract.md section 4.4)."""
    return values.sum(dim=-1, dtype=torch.float64)


def _row_squares(values: torch.Tensor) -> torch.Tensor:
    """Row sums of squares, accumulated in float64, from row norms (no squared temporary)."""
    return torch.linalg.vector_norm(values, dim=-1, dtype=torch.float64).square()


def _centered(values, valid, mean, out):
    """``where(m, (values - hi) - lo, 0)`` into ``out``, with ``hi + lo`` the float64 ``mean``."""
    high = mean.to(values.dtype)
    low = (mean - high.to(torch.float64)).to(values.dtype)
    return torch.sub(values, high, out=out).sub_(low).masked_fill_(~valid, 0.0)


def _suffix_sums(selected: torch.Tensor, gamma: float) -> torch.Tensor:
    """gamma = 1: ``G[:, t] = sum_{u >= t} select(m, r)[:, u]`` as a reversed cumulative sum in
    float64 (each suffix summed from its own terms: no prefix difference, no cancellation)."""
    return selected.to(torch.float64).flip(1).cumsum_(dim=1).flip(1)


def _blocked_discounted_sums(selected: torch.Tensor, gamma: float) -> torch.Tensor:
    """gamma < 1: an exact blocked recurrence in float64. Within chunks of ``C = 128`` positions a
    ``(C, C)`` discount matrix gives the chunk-local sums ``S``; the return at each chunk start,
    ``H[k] = sum_{j >= k} gamma^(C (j - k)) * S[j, 0]``, comes from one more ``(K, K)`` discount
    matrix over the ``K`` chunks; then ``G[k, t] = S[k, t] + gamma^(C - t) * H[k + 1]``."""
    batch, length = selected.shape
    chunk = min(_BLOCK, length)
    chunks = -(-length // chunk)
    padded = torch.nn.functional.pad(selected.to(torch.float64), (0, chunks * chunk - length))
    local = torch.matmul(padded.view(batch, chunks, chunk), _discount_matrix(gamma, chunk, 1, selected.device))
    starts = torch.matmul(local[:, :, 0], _discount_matrix(gamma, chunks, chunk, selected.device))
    offsets = torch.arange(chunk, dtype=torch.float64, device=selected.device)
    carry_weight = torch.pow(gamma, chunk - offsets)  # gamma^(C - t)
    local[:, :-1].add_(starts[:, 1:, None] * carry_weight)
    return local.view(batch, chunks * chunk)[:, :length]


def _discount_matrix(gamma: float, size: int, step: int, device: torch.device) -> torch.Tensor:
    """``D[u, t] = gamma^(step * (u - t))`` for ``u >= t``, else 0 (float64): ``x @ D`` sums the
    discounted terms at and after each index."""
    offsets = torch.arange(size, dtype=torch.float64, device=device)
    lags = offsets[:, None] - offsets[None, :]
    return torch.where(lags >= 0, torch.pow(gamma, step * lags.clamp(min=0)), 0.0)
