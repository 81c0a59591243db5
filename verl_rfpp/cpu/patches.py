"""The CPU backend's changes to verl, one ``verl_rfpp.adapter.patching.Patch`` each (``TABLE``): the
minimal patches for verl 0.9.1's CUDA-only assumptions, each saying what it works around, and two
observing hooks for the run trace.

Applied at import of ``verl_rfpp.cpu.backend``, which verl performs early (``VERL_USE_EXTERNAL_MODULES``),
before its worker modules bind these names (the modules that bind one by name are rebound anyway).
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import os

from verl_rfpp import catalog
from verl_rfpp.adapter.patching import Attribute, Internal, Patch, failures
from verl_rfpp.cpu import ROLLOUT_NAME, trace

DISTRIBUTED = "verl.utils.distributed"
AGENT_LOOP = "verl.experimental.agent_loop.agent_loop"
LLM_SERVER = "verl.workers.rollout.llm_server"
REPLAY_BUFFER = "verl.trainer.ppo.v1.replay_buffer"
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


# The identity of the agent-loop session running in this asyncio task (its sample and session), so
# the hf_cpu server's sampling depends on it alone (docs/cpu-backend.md, "Same seed, same run").
SESSION = contextvars.ContextVar("verl_rfpp_cpu_session", default=None)
SESSION_KEY = "rfpp_session"  # the session's identity in the reward function's ``extra_info``


def _plain(value) -> str:
    try:
        return str(int(value))  # a tensor or numpy scalar in verl's batches
    except (TypeError, ValueError):
        return str(value)


def _identified_sessions(original):
    # verl's agent-loop worker runs each session (a prompt's sample) as a task; verl 0.9.1's v1
    # trainer gives every request of a step the same id (``det-0``: no per-row priority on that
    # path) and the legacy one a per-row id, so the session's identity is taken here: the trainer
    # step, the prompt's dataset index, its sample number (legacy) and session id (v1). The reward
    # function sees it too, as ``extra_info[SESSION_KEY]`` (a copy of the row's ``extra_info``), so
    # a reward that draws noise can draw it per session, whatever the order scores are computed in.
    @functools.wraps(original)
    async def run_agent_loop(self, sampling_params, trajectory, *args, **kwargs):
        identity = "-".join(_plain(part) for part in (
            "val" if trajectory.get("validate") else "train", trajectory.get("step"), trajectory.get("sample_index"),
            trajectory.get("rollout_n"), kwargs.get("session_id", 0)))
        if isinstance(kwargs.get("extra_info"), dict):
            kwargs["extra_info"] = {**kwargs["extra_info"], SESSION_KEY: identity}
        token = SESSION.set(identity)
        try:
            return await original(self, sampling_params, trajectory, *args, **kwargs)
        finally:
            SESSION.reset(token)

    return run_agent_loop


def _session_request_ids(original):
    # verl's client names the request its server sees (``_vllm_request_id``: a fresh uuid, or
    # verl's own id under full_determinism); for the hf_cpu server, the session's identity.
    @functools.wraps(original)
    def request_id(self, request_id):
        session = SESSION.get()
        if session is None or self.config.actor_rollout_ref.rollout.name != ROLLOUT_NAME:
            return original(self, request_id)
        return session

    return request_id


def _rows_in_prompt_order(original):
    # verl 0.9.1's v1 trainer takes a step's rows from TransferQueue in the order the sessions
    # finished (the replay buffer's metadata is filled as they arrive), so the order of the sums
    # over rows (gradients, advantages' statistics) changed from run to run. Here the rows are put
    # in the prompts' dataset order (``extra_info.index``), then session, then output, whatever
    # the arrival order; the prompt uids, random per run, are not used.
    @functools.wraps(original)
    def materialize_batch(self, partition_id, *args, **kwargs):
        import dataclasses

        import transfer_queue as tq

        batch = original(self, partition_id, *args, **kwargs)
        if not batch.keys:
            return batch
        index = tq.kv_batch_get(keys=batch.keys, partition_id=partition_id, select_fields=["index"])["index"]
        session_and_output = [tuple(int(part) for part in key.rsplit("_", 2)[1:]) for key in batch.keys]
        order = sorted(range(len(batch.keys)), key=lambda row: (int(index[row]), session_and_output[row]))
        return dataclasses.replace(batch, keys=[batch.keys[row] for row in order],
                                   tags=[batch.tags[row] for row in order])

    return materialize_batch


ADV_STD_METRIC = "cpu/advantages_std"
# ``module:function``; when set, the driver adds ``function(batch)``'s metrics to every step's data
# metrics (a task's own measurements, e.g. verl_rfpp.experiments.noisy.task.probe)
PROBE_ENV = "VERL_RFPP_METRICS_PROBE"


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
                    for name in catalog.names()}
        trace.write("metrics", adv_std=f"{std:.6g}", **resolved)
        probe = os.environ.get(PROBE_ENV)
        if probe:
            module, _, name = probe.partition(":")
            metrics.update(getattr(importlib.import_module(module), name)(batch))
        return metrics

    return compute_data_metrics


TABLE: tuple[Patch, ...] = (
    Patch(name="CPU backend: one gloo process group", module=DISTRIBUTED,
          slot=Attribute("initialize_global_process_group_ray"), replace=_gloo_only,
          internals=(Internal(DISTRIBUTED, "initialize_global_process_group_ray", ("timeout_second", "backend")),),
          others=EVERY_RUN, bound_by=("verl.workers.engine_workers", "verl.checkpoint_engine.base")),
    Patch(name="CPU backend: unpinned CPU offload", module=FSDP_ENGINE, slot=Attribute("CPUOffloadPolicy"),
          replace=_unpinned, internals=(Internal(FSDP_ENGINE, "CPUOffloadPolicy"),), others=EVERY_RUN),
    Patch(name="CPU backend: traced policy-loss lookup", module=WORKER_LOSSES, slot=Attribute("get_policy_loss_fn"),
          replace=_traced_policy_loss_lookup, internals=(Internal(WORKER_LOSSES, "get_policy_loss_fn", ("name",)),),
          others=EVERY_RUN + " (observes only)"),
    Patch(name="CPU backend: advantage std metric", module=METRIC_UTILS, slot=Attribute("compute_data_metrics"),
          replace=_with_advantage_std,
          internals=(Internal(METRIC_UTILS, "compute_data_metrics", ("batch",)),
                     Internal(CORE_ALGOS, "ADV_ESTIMATOR_REGISTRY", kind=dict)),
          others=EVERY_RUN + " (adds one metric)",
          bound_by=("verl.trainer.ppo.ray_trainer", "verl.trainer.ppo.v1.trainer_base",
                    "verl.experimental.separation.ray_trainer")),
    Patch(name="CPU backend: agent-loop session identity", module=AGENT_LOOP,
          slot=Attribute("AgentLoopWorker._run_agent_loop"), replace=_identified_sessions,
          internals=(Internal(AGENT_LOOP, "AgentLoopWorker._run_agent_loop",
                              ("self", "sampling_params", "trajectory")),),
          others=EVERY_RUN + " (a context variable, and the identity in a copy of the reward's extra_info)"),
    Patch(name="CPU backend: hf_cpu request ids", module=LLM_SERVER, slot=Attribute("LLMServerClient._vllm_request_id"),
          replace=_session_request_ids,
          internals=(Internal(LLM_SERVER, "LLMServerClient._vllm_request_id", ("self", "request_id")),),
          others="none: other rollouts' request ids are verl's"),
    Patch(name="CPU backend: v1 batch rows in prompt order", module=REPLAY_BUFFER,
          slot=Attribute("ReplayBuffer._materialize_batch"), replace=_rows_in_prompt_order,
          internals=(Internal(REPLAY_BUFFER, "ReplayBuffer._materialize_batch",
                              ("self", "partition_id", "selected_prompt_uids")),),
          others=EVERY_RUN + " (orders a step's rows; the same rows)"),
)


def apply() -> None:
    """Apply ``TABLE`` now (idempotent; runs in every process that imports ``verl_rfpp.cpu.backend``); a
    patch whose verl internals moved raises, so ``import verl`` fails naming it."""
    for patch in TABLE:
        importlib.import_module(patch.module)
        patch.apply()
    failed = failures(TABLE)
    if failed:
        raise RuntimeError("verl_rfpp.cpu cannot patch this verl: " + "; ".join(
            f"{name}: {', '.join(problems)}" for name, problems in failed.items()))
