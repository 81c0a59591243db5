"""Worker side of the gloo tests: real processes, a file rendezvous, bounded collectives."""

from __future__ import annotations

import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from verl_rfpp import EmptyPopulationError, masked_global_normalize
from verl_rfpp.normalization import normalize_row_constant


def run(rank, world_size, init_file, scenarios, results):
    """For each scenario ``(name, values_shards, mask_shards)`` normalize this rank's shard; values
    of shape ``(rows,)`` are row constants (``normalize_row_constant``)."""
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size,
            timeout=timedelta(seconds=60),
        )
        group = dist.new_group(list(range(world_size)))
        for name, values_shards, mask_shards in scenarios:
            try:
                values, mask = values_shards[rank], mask_shards[rank]
                if values.dim() == 1:
                    normalized, stats = normalize_row_constant(values, mask.bool(), torch.float64, process_group=group)
                else:
                    normalized, stats = masked_global_normalize(values, mask, process_group=group)
                results.put((rank, name, "ok", normalized, tuple(stats)))
            except EmptyPopulationError as error:
                results.put((rank, name, "empty", str(error), None))
        dist.destroy_process_group()
    except Exception:  # report instead of dying silently, so the parent fails fast
        results.put((rank, "crash", "error", traceback.format_exc(), None))
