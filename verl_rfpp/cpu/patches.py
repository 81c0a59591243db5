"""The minimal patches for verl 0.9.1's CUDA-only assumptions; each says what it works around.

Applied at import of ``verl_rfpp.cpu``, which verl performs early (``VERL_USE_EXTERNAL_MODULES``),
before its worker modules bind these names.
"""

from __future__ import annotations

import functools
import importlib
import os

from verl_rfpp.cpu import trace

MARKER = "__verl_rfpp_cpu__"


def _once(module, name, make):
    current = getattr(module, name)
    if getattr(current, MARKER, False):
        return
    patched = make(current)
    setattr(patched, MARKER, True)
    setattr(module, name, patched)


def _gloo_only(original):
    # verl.utils.distributed.initialize_global_process_group_ray builds the backend string
    # f"cpu:gloo,{device}:{backend}", which is "cpu:gloo,cpu:gloo" on the CPU: torch rejects the
    # duplicate device type. One gloo backend serves the CPU.
    @functools.wraps(original)
    def initialize(timeout_second=None, backend=None):
        return original(timeout_second=timeout_second, backend=backend or "gloo")

    return initialize


def _unpinned(original):
    # verl's FSDP2 engine forces CPUOffloadPolicy(pin_memory=True) for the reference model;
    # pinning host memory raises without an accelerator. On the CPU there is nothing to pin.
    @functools.wraps(original, updated=())
    def policy(*args, pin_memory=False, **kwargs):
        return original(*args, pin_memory=False, **kwargs)

    return policy


ADV_STD_METRIC = "cpu/advantages_std"
# ``module:function``; when set, the driver adds ``function(batch)``'s metrics to every step's data
# metrics (a task's own measurements, e.g. verl_rfpp.curves.noisy_task.probe)
PROBE_ENV = "VERL_RFPP_METRICS_PROBE"
TRACED_ESTIMATORS = ("reinforce_plus_plus", "reinforce_plus_plus_baseline")


# The two hooks below change no number verl computes; they only observe (the run trace and one
# extra metric), identically for our estimators and verl's built-ins.

def _traced_policy_loss_lookup(original):
    # verl.workers.utils.losses.ppo_loss (both trainers' actor update) looks the policy loss up per
    # micro-batch; the returned function is wrapped to trace the micro-batch on this FSDP rank.
    @functools.wraps(original)
    def get_policy_loss_fn(name):
        loss_fn = original(name)

        @functools.wraps(loss_fn)
        def traced(*args, **kwargs):
            if trace.enabled():
                mask = kwargs["response_mask"]
                trace.write("tokens", rank=trace.rank(), rows=mask.shape[0], valid=int(mask.sum()),
                            holes=trace.interior_holes(mask))
            return loss_fn(*args, **kwargs)

        return traced

    return get_policy_loss_fn


def _with_advantage_std(original):
    # verl 0.9.1 logs the advantages' mean/max/min only; the curves compare their spread across
    # estimators, so the driver adds the population std over valid tokens (the same measure for
    # every estimator) and traces which function verl's registry resolves each REINFORCE++ name to.
    @functools.wraps(original)
    def compute_data_metrics(batch, *args, **kwargs):
        metrics = original(batch, *args, **kwargs)
        valid = batch.batch["response_mask"].bool()
        advantages = batch.batch["advantages"][valid].double()
        std = float(advantages.std(correction=0)) if advantages.numel() else float("nan")
        metrics[ADV_STD_METRIC] = std
        from verl.trainer.ppo import core_algos

        resolved = {name: getattr(core_algos.ADV_ESTIMATOR_REGISTRY.get(name), "__module__", None)
                    for name in TRACED_ESTIMATORS}
        trace.write("metrics", adv_std=f"{std:.6g}", **resolved)
        probe = os.environ.get(PROBE_ENV)
        if probe:
            module, _, name = probe.partition(":")
            metrics.update(getattr(importlib.import_module(module), name)(batch))
        return metrics

    return compute_data_metrics


def apply() -> None:
    """Idempotent; runs in every process that imports ``verl_rfpp.cpu``."""
    import verl.trainer.ppo.metric_utils as metric_utils
    import verl.utils.distributed as distributed
    import verl.workers.engine.fsdp.transformer_impl as fsdp_engine
    import verl.workers.utils.losses as worker_losses

    _once(distributed, "initialize_global_process_group_ray", _gloo_only)
    _once(fsdp_engine, "CPUOffloadPolicy", _unpinned)
    _once(worker_losses, "get_policy_loss_fn", _traced_policy_loss_lookup)
    _once(metric_utils, "compute_data_metrics", _with_advantage_std)
