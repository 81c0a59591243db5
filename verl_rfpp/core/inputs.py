"""What the numerical core accepts (docs/contract.md sections 1.6 and 9.5), checked before any pass.

Every refusal is an ``RfppInputError`` naming the argument, what was found, what is expected and
the fix. The checks read only metadata (types, shapes, dtypes, devices); the one check that reads
values, a NaN in a floating mask, is a device-side assert off the CPU (no host sync).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any, Optional

import torch

from verl_rfpp.errors import RfppInputError

# docs/contract.md section 1.6: the dtypes computed exactly (bf16/fp16 in float32, section 4.4).
VALUE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
MASK_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, *VALUE_DTYPES)


def dtype_names(dtypes) -> str:
    return ", ".join(str(dtype).replace("torch.", "") for dtype in dtypes)


def describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        if value.is_nested:
            return "a nested tensor"
        if value.layout != torch.strided:
            return f"a {value.layout} tensor"
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:120]


def check_tensor(value: Any, name: str) -> None:
    """``value`` is a plain (strided, not nested, sparse or meta) 2-D ``torch.Tensor``."""
    if not isinstance(value, torch.Tensor) or value.is_nested or value.layout != torch.strided:
        raise RfppInputError(
            f"verl_rfpp: {name} must be a dense torch.Tensor of shape (bs, response_length), got "
            f"{describe(value)}; pass torch.as_tensor(...) (a nested or sparse tensor: .to_padded_tensor(0.0) "
            "or .to_dense())."
        )
    if value.device.type == "meta":
        raise RfppInputError(f"verl_rfpp: {name} is on the meta device (it holds no values); pass real data.")
    if value.dim() != 2:
        raise RfppInputError(
            f"verl_rfpp: {name} must be (bs, response_length), got shape {tuple(value.shape)} "
            f"({value.dim()} dimensions)."
        )


def check_values_and_mask(values: Any, response_mask: Any, name: str) -> None:
    """docs/contract.md sections 1.6 and 9.5 for a ``(bs, T)`` value tensor and its mask."""
    check_tensor(values, name)
    check_tensor(response_mask, "response_mask")
    if values.shape != response_mask.shape:
        raise RfppInputError(
            f"verl_rfpp: {name} has shape {tuple(values.shape)} but response_mask has shape "
            f"{tuple(response_mask.shape)}; both must be (bs, response_length)."
        )
    if values.device != response_mask.device:
        raise RfppInputError(
            f"verl_rfpp: {name} is on {values.device} but response_mask on {response_mask.device}; "
            f"move both to one device, e.g. response_mask.to({name}.device)."
        )
    if values.dtype not in VALUE_DTYPES:
        raise RfppInputError(
            f"verl_rfpp: {name} must be floating point, one of {dtype_names(VALUE_DTYPES)} "
            f"(docs/contract.md section 1.6); got {values.dtype}. Cast it with .float()."
        )
    if response_mask.dtype not in MASK_DTYPES:
        raise RfppInputError(
            f"verl_rfpp: response_mask has dtype {response_mask.dtype}; supported: "
            f"{dtype_names(MASK_DTYPES)} (docs/contract.md section 1.6). Pass it as bool or int64."
        )
    check_response_mask(response_mask)


def check_response_mask(response_mask: torch.Tensor) -> None:
    """Refuse a floating mask holding NaN (``NaN != 0`` would count as valid, docs/contract.md
    section 1). Bool and integer masks, verl's own, cost nothing; a floating one one pass. A
    jagged nested mask (verl's no-padding layout) is read through its values. On accelerators a
    device-side assert (no host sync)."""
    if not response_mask.is_floating_point():
        return
    values = response_mask.values() if response_mask.is_nested else response_mask
    nan = torch.isnan(values)
    message = ("verl_rfpp: response_mask holds NaN{where}; a mask must be 0 (masked) or nonzero "
               "(valid) everywhere. Fix the mask upstream, e.g. response_mask.nan_to_num(0.0).")
    if values.device.type != "cpu":
        torch._assert_async(~nan.any(), message.format(where=""))
    elif nan.any():
        if response_mask.is_nested:
            flat = int(nan.nonzero()[0, 0])
            offsets = response_mask.offsets().tolist()
            row = max(i for i, start in enumerate(offsets[:-1]) if start <= flat)
            position = flat - offsets[row]
        else:
            row, position = (int(i) for i in nan.nonzero()[0])
        raise RfppInputError(message.format(where=f" (first at row {row}, position {position})"))


def real_number(value: Any, name: str, expected: str, fix: str) -> float:
    """``value`` as a float when it is a real number (not a bool, a string or a tensor of many)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex() and value.dtype != torch.bool:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, Real):
        raise RfppInputError(f"verl_rfpp: {name} = {describe(value)}: expected {expected}. Fix: {fix}")
    return float(value)


def check_variance_floor(variance_floor: Any) -> float:
    """The variance floor of docs/contract.md section 4.3: a finite number > 0."""
    floor = real_number(variance_floor, "variance_floor", "a finite number > 0", "keep the default 1e-8.")
    if not (math.isfinite(floor) and floor > 0.0):
        raise RfppInputError(
            f"verl_rfpp: variance_floor = {floor!r}: expected a finite number > 0 (with 0 a zero-variance "
            "population divides 0 by 0). Fix: keep the default 1e-8 (docs/contract.md section 4.3)."
        )
    return floor


def check_process_group(process_group: Optional[Any]) -> None:
    """``None`` or a ``torch.distributed.ProcessGroup`` (docs/contract.md section 4.5)."""
    import torch.distributed as dist

    if process_group is None:
        return
    if not (dist.is_available() and isinstance(process_group, dist.ProcessGroup)):
        raise RfppInputError(
            f"verl_rfpp: process_group = {describe(process_group)}: expected None (the tensors are the "
            "whole population) or a torch.distributed.ProcessGroup, e.g. torch.distributed.group.WORLD."
        )
