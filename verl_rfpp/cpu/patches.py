"""The CPU backend's changes to verl, one ``verl_rfpp.patching.Patch`` each (``TABLE``): the
minimal patches for verl 0.9.1's CUDA-only assumptions, each saying what it works around, and two
observing hooks for the run trace.

Applied at import of ``verl_rfpp.cpu``, which verl performs early (``VERL_USE_EXTERNAL_MODULES``),
before its worker modules bind these names (the modules that bind one by name are rebound anyway).
"""

from __future__ import annotations

import functools
import importlib
import os

from verl_rfpp.cpu import trace
from verl_rfpp.patching import Attribute, Internal, Patch, failures

DISTRIBUTED = "verl.utils.distributed"
FSDP_ENGINE = "verl.workers.engine.fsdp.transformer_impl"
WORKER_LOSSES = "verl.workers.utils.losses"
METRIC_UTILS = "verl.trainer.ppo.metric_utils"
CORE_ALGOS = "verl.trainer.ppo.core_algos"
EVERY_RUN = "the same as for ours: the CPU backend serves every run that imports it"

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


TABLE: tuple[Patch, ...] = (
    Patch("CPU backend: one gloo process group", DISTRIBUTED, Attribute("initialize_global_process_group_ray"),
          _gloo_only, (Internal(DISTRIBUTED, "initialize_global_process_group_ray", ("timeout_second", "backend")),),
          EVERY_RUN, ("verl.workers.engine_workers", "verl.checkpoint_engine.base")),
    Patch("CPU backend: unpinned CPU offload", FSDP_ENGINE, Attribute("CPUOffloadPolicy"), _unpinned,
          (Internal(FSDP_ENGINE, "CPUOffloadPolicy"),), EVERY_RUN),
    Patch("CPU backend: traced policy-loss lookup", WORKER_LOSSES, Attribute("get_policy_loss_fn"),
          _traced_policy_loss_lookup, (Internal(WORKER_LOSSES, "get_policy_loss_fn", ("name",)),),
          EVERY_RUN + " (observes only)"),
    Patch("CPU backend: advantage std metric", METRIC_UTILS, Attribute("compute_data_metrics"), _with_advantage_std,
          (Internal(METRIC_UTILS, "compute_data_metrics", ("batch",)),
           Internal(CORE_ALGOS, "ADV_ESTIMATOR_REGISTRY", kind=dict)),
          EVERY_RUN + " (adds one metric)",
          ("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.trainer_base",
           "verl.experimental.separation.ray_trainer")),
)


def apply() -> None:
    """Apply ``TABLE`` now (idempotent; runs in every process that imports ``verl_rfpp.cpu``); a
    patch whose verl internals moved raises, so ``import verl`` fails naming it."""
    for patch in TABLE:
        importlib.import_module(patch.module)
        patch.apply()
    failed = failures(TABLE)
    if failed:
        raise RuntimeError("verl_rfpp.cpu cannot patch this verl: " + "; ".join(
            f"{name}: {', '.join(problems)}" for name, problems in failed.items()))
