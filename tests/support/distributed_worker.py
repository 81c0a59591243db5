"""Worker side of the gloo tests: real processes, a file rendezvous, bounded collectives.

Results travel as a file of plain numpy/Python data, written and closed before the worker exits.
Never a torch tensor on a multiprocessing queue: torch shares a tensor's storage through a file
descriptor owned by the sender, so a parent that unpickles it after the sender has exited gets
``FileNotFoundError`` (the race this layout removes: the parent reads only after every join).
"""

from __future__ import annotations

import pickle
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from verl_rfpp import EmptyPopulationError, masked_global_normalize
from verl_rfpp.core import passes
from verl_rfpp.core.normalization import normalize_rows


def row_constant(row_values, valid, process_group=None):
    """The section 4 normalization of an advantage constant along each row, as
    ``reinforce_plus_plus_baseline`` computes it: ``normalize_rows`` over the rows weighted by
    their lengths, then ``broadcast_rows`` onto the boolean mask ``valid`` (float64)."""
    normalized_rows, stats = normalize_rows(row_values, passes.row_lengths(valid), process_group=process_group)
    advantages, _ = passes.broadcast_rows(valid, normalized_rows, row_values, torch.float64)
    return advantages, stats


def run(rank, world_size, init_file, scenarios, result_file):
    """For each scenario ``(name, values_shards, mask_shards)`` normalize this rank's shard; values
    of shape ``(rows,)`` are row constants (``row_constant``). Writes
    ``[(name, status, payload, stats)]`` to ``result_file``, or ``("crash", traceback)``."""
    results = []
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
                    normalized, stats = row_constant(values, mask.bool(), process_group=group)
                else:
                    normalized, stats = masked_global_normalize(values, mask, process_group=group)
                results.append((name, "ok", normalized.numpy().copy(), tuple(stat.item() for stat in stats)))
            except EmptyPopulationError as error:
                results.append((name, "empty", str(error), None))
        dist.destroy_process_group()
        outcome = ("ok", results)
    except Exception:  # report instead of dying silently, so the parent fails with the cause
        outcome = ("crash", traceback.format_exc())
    with open(result_file, "wb") as handle:
        pickle.dump(outcome, handle)


def run_refusals(rank, world_size, init_file, scenarios, result_file, timeout_s=30.0):
    """For each scenario ``(name, estimator, shards)``, ``shards[rank]`` being this rank's
    ``(values, mask, index)``, call the estimator with the group and record
    ``(name, error type, message)``: every rank must raise an ``RfppError``, whichever rank's
    input is bad. Writes ``[(name, outcome, message)]`` or ``("crash", traceback)``."""
    from verl_rfpp import RfppError, reinforce_plus_plus, reinforce_plus_plus_baseline

    results = []
    try:
        dist.init_process_group(
            "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        group = dist.new_group(list(range(world_size)))
        for name, estimator, shards in scenarios:
            values, mask, index = shards[rank]
            try:
                if estimator == "normalize":
                    masked_global_normalize(values, mask, process_group=group)
                elif estimator == "rfpp":
                    reinforce_plus_plus(values, mask, index, process_group=group)
                else:
                    reinforce_plus_plus_baseline(values, mask, index, process_group=group)
                results.append((name, "ok", ""))
            except RfppError as error:
                results.append((name, type(error).__name__, str(error)))
            except Exception as error:  # a timeout of the group, or a raw error: the test fails on it
                results.append((name, "raw " + type(error).__name__, str(error)[:500]))
                break
        dist.destroy_process_group()
        outcome = ("ok", results)
    except Exception:
        outcome = ("crash", traceback.format_exc())
    with open(result_file, "wb") as handle:
        pickle.dump(outcome, handle)
