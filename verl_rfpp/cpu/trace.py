"""The run trace of the CPU backend: one line per event, appended to the file named by
``VERL_RFPP_TRACE`` by any process of the run (driver, FSDP ranks, rollout servers).

This module imports nothing from verl and never imports ``verl_rfpp.plugin``: the CPU backend
must run verl's built-in estimators untouched when the plugin is excluded
(``VERL_USE_EXTERNAL_PLUGINS=none``). The variable's name is the plugin's ``TRACE_ENV``.

Line kinds (``<kind> key=value ...``):

- ``<estimator> pid= valid_tokens= raw_adv_std=``: written by the plugin, one per estimator call;
- ``tokens rank= pid= rows= valid= holes=``: one per policy-loss call on an FSDP rank (a
  micro-batch): its rows, valid response tokens, rows whose ``response_mask`` has an interior hole;
- ``metrics pid= adv_std= reinforce_plus_plus= reinforce_plus_plus_baseline=``: one per step in
  the driver: the token std of the advantages and the module verl's registry resolves each name to;
- ``weights pid= global_steps= abs_sum=``: one per weight sync into a rollout server.
"""

from __future__ import annotations

import os
from typing import Optional

TRACE_ENV = "VERL_RFPP_TRACE"
TRACE_FILE = "trace.txt"  # its name in a run's directory (the CPU backend's ``--out``)


def enabled() -> bool:
    return bool(os.environ.get(TRACE_ENV))


def write(kind: str, **fields: object) -> None:
    """Append ``<kind> pid=<pid> key=value ...`` when the trace is on; one write per line."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    text = " ".join([kind, f"pid={os.getpid()}", *(f"{key}={value}" for key, value in fields.items())])
    with open(path, "a") as handle:
        handle.write(text + "\n")


def parse(line: str) -> tuple[str, dict[str, str]]:
    """``(kind, {key: value})`` of one trace line."""
    kind, *parts = line.split()
    return kind, dict(part.split("=", 1) for part in parts if "=" in part)


def lines_of(trace: list[str], kind: str) -> list[dict[str, str]]:
    """The fields of every line of ``kind``."""
    return [fields for k, fields in map(parse, trace) if k == kind]


def interior_holes(mask) -> int:
    """Rows of a ``(bs, T)`` mask with a zero between their first and last one (multi-turn
    tool output inside the response)."""
    import torch

    valid = mask.bool()
    positions = torch.arange(valid.shape[-1], device=valid.device).expand_as(valid)
    first = torch.where(valid, positions, valid.shape[-1]).min(dim=-1).values
    last = torch.where(valid, positions, -1).max(dim=-1).values
    span = (last - first + 1).clamp(min=0)
    return int((span > valid.sum(dim=-1)).sum())


def rank() -> Optional[int]:
    """This process's rank in torch.distributed's default group, else ``RANK``, else ``None``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    value = os.environ.get("RANK")
    return int(value) if value is not None and value.isdigit() else None
