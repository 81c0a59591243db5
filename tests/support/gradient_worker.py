"""One data-parallel rank of the gradient-equivalence tests (docs/contract.md section 5).

Run as ``python gradient_worker.py SPEC.json RANK``. The rank joins a gloo group through a file
rendezvous (a 180 s timeout on every collective), switches on the opt-in CPU backend exactly as
``verl-rfpp demo`` does, and for each scenario of the spec:

1. composes verl's real ``ppo_trainer`` config (our recipe + the scenario's overrides);
2. builds verl's real actor worker, ``ActorRolloutRefWorker(role="actor")`` with the FSDP2 engine;
3. hands it one step batch through verl's own trainer code, ``RayPPOTrainer._update_actor`` (it
   sets ``global_batch_size``, the mini-batch size and the epochs, and packs the batch to the
   no-padding layout), with verl's dispatch chunking (``BatchData.chunk``) to this rank;
4. records, at every optimizer step, the gradient the real path accumulated and the parameters it
   was taken at (``engine.optimizer_step`` observed before it runs, so before clipping), which
   rows formed the mini-batch (all ranks) and the micro-batch shapes.

Nothing on the path is replaced: the observers only read and then call verl's own method.
Results travel as one ``.npz`` / JSON pair per scenario written by rank 0 (plain numpy, never a
torch tensor through a queue); a crash writes its traceback to ``error-<rank>.txt``.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
import traceback
from datetime import timedelta
from pathlib import Path


def _environment(rank: int, world: int) -> None:
    os.environ.update({
        "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1",  # read by verl's Worker; the group is file-based
        "VERL_PLATFORM": "cpu", "VERL_ENGINE_DEVICE": "cuda", "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
    })
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)


def _full(tensor):
    """The whole tensor on every rank (FSDP2 parameters and gradients are DTensor shards)."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _batch(arrays: dict):
    """verl's DataProto of the step batch (left-padded prompts, right-padded responses)."""
    import numpy as np
    import torch
    from verl import DataProto

    tensors = {key: torch.from_numpy(np.ascontiguousarray(value)) for key, value in arrays.items()}
    return DataProto.from_single_dict(tensors)


def _torch_padding_for_verl_without_a_cpu_fallback() -> None:
    """verl 0.9.0 packs a batch only through flash_attn's ``bert_padding`` (CUDA wheels only);
    verl 0.9.1 falls back to torch when flash_attn is missing. On such a verl, hand its
    ``attention_utils`` torch versions of the four functions, so its real path runs on the CPU."""
    import torch
    import torch.nn.functional as F
    import verl.utils.attention_utils as attention_utils

    try:
        attention_utils._get_attention_functions()
        return
    except ImportError:
        pass

    def index_first_axis(tensor, indices):
        return tensor[indices]

    def pad_input(hidden, indices, batch, seqlen):
        out = hidden.new_zeros(batch * seqlen, *hidden.shape[1:])
        out[indices] = hidden
        return out.view(batch, seqlen, *hidden.shape[1:])

    def unpad_input(hidden, attention_mask, unused_mask=None):
        masks = attention_mask + unused_mask if unused_mask is not None else attention_mask
        lengths = masks.sum(dim=-1, dtype=torch.int32)
        indices = torch.nonzero(masks.flatten(), as_tuple=False).flatten()
        offsets = F.pad(torch.cumsum(lengths, dim=0, dtype=torch.int32), (1, 0))
        return (index_first_axis(hidden.reshape(-1, *hidden.shape[2:]), indices), indices, offsets,
                int(lengths.max()), attention_mask.sum(dim=-1, dtype=torch.int32))

    def rearrange(*args, **kwargs):  # einops, only if the path asks for it
        from einops import rearrange as einops_rearrange

        return einops_rearrange(*args, **kwargs)

    functions = (index_first_axis, pad_input, rearrange, unpad_input)
    attention_utils._get_attention_functions = lambda: functions


def run_scenario(scenario: dict, spec: dict, rank: int, world: int, out: Path) -> None:
    import numpy as np
    import torch.distributed as dist
    from verl.protocol import BatchData
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import no_padding_2_padding

    from verl_rfpp import plugin
    from verl_rfpp.adapter.compose import compose_verl_config

    config = compose_verl_config(list(spec["base_overrides"]) + list(scenario["overrides"]))
    if not scenario.get("fix", True):
        plugin.table.ENGINE.undo()  # verl's own denominator, to measure what the fix changes
    else:
        plugin.table.ENGINE.apply()  # a no-op unless a previous scenario unpatched it
    worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="actor")
    worker.init_model()
    engine = worker.actor.engine
    module = engine.module

    steps = []
    forward_backward = engine.forward_backward_batch
    optimizer_step = engine.optimizer_step
    forward_step = engine.forward_step

    def observe_forward_backward(data, loss_function, forward_only=False):
        rows = [None] * world
        dist.all_gather_object(rows, data["row_id"].tolist())
        steps.append({"rows": [r for part in rows for r in part],
                      "global_batch_size": float(data["global_batch_size"]), "micro": [],
                      "log_probs": {}})
        return forward_backward(data, loss_function, forward_only)

    def observe_forward_step(micro_batch, loss_function, forward_only):
        steps[-1]["micro"].append(int(micro_batch.batch_size[0]))
        loss, output = forward_step(micro_batch, loss_function, forward_only)
        log_probs = no_padding_2_padding(output["model_output"]["log_probs"], micro_batch)
        for row, values in zip(micro_batch["row_id"].tolist(), log_probs.double().tolist(), strict=True):
            steps[-1]["log_probs"][row] = values
        return loss, output

    def observe_optimizer_step():
        parts = [None] * world
        dist.all_gather_object(parts, (steps[-1]["log_probs"], steps[-1]["micro"]))
        steps[-1]["log_probs"] = {row: values for part, _ in parts for row, values in part.items()}
        steps[-1]["micro"] = [micro for _, micro in parts]  # per rank
        names = [name for name, _ in module.named_parameters()]
        grads = {n: _full(p.grad).detach().double().numpy().copy() for n, p in module.named_parameters()}
        params = {n: _full(p).detach().double().numpy().copy() for n, p in module.named_parameters()}
        steps[-1]["names"] = names
        steps[-1]["grads"], steps[-1]["params"] = grads, params
        return optimizer_step()

    engine.forward_backward_batch = observe_forward_backward
    engine.forward_step = observe_forward_step
    engine.optimizer_step = observe_optimizer_step

    arrays = dict(np.load(scenario["data"]))
    batch = _batch(arrays)

    class _ThisRank:
        """verl's worker group seen from one rank: the dispatch chunk of this rank, our worker."""

        def update_actor(self, batch_td):
            # the chunk crosses a process boundary in verl (Ray pickles it; that also unlocks
            # the consolidated TensorDict)
            chunk = BatchData(batch_td).chunk(chunks=world)[rank]
            return worker.update_actor(pickle.loads(pickle.dumps(chunk)))

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    trainer.config = config
    trainer.actor_rollout_wg = _ThisRank()
    output = RayPPOTrainer._update_actor(trainer, batch)
    metrics = output.meta_info["metrics"]

    if rank == 0:
        payload = {}
        summary = []
        for index, step in enumerate(steps):
            for name in step["names"]:
                payload[f"{index}/grad/{name}"] = step["grads"][name]
                payload[f"{index}/param/{name}"] = step["params"][name]
            summary.append({"rows": step["rows"], "global_batch_size": step["global_batch_size"],
                            "micro": step["micro"], "names": step["names"], "log_probs": step["log_probs"]})
        np.savez(out / f"{scenario['name']}.npz", **payload)
        plain = {key: [float(v) for v in value] if isinstance(value, list) else float(value)
                 for key, value in metrics.items() if isinstance(value, (int, float, list))}
        (out / f"{scenario['name']}.json").write_text(json.dumps({"steps": summary, "metrics": plain}))
    # drop our references (the closures above share these cells, so rebind rather than del)
    worker = engine = module = None
    dist.barrier()


def main() -> None:
    spec_file, rank = Path(sys.argv[1]), int(sys.argv[2])
    spec = json.loads(spec_file.read_text())
    world = int(spec["world"])
    out = Path(spec["out"])
    _environment(rank, world)
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=f"file://{spec['init_file']}", rank=rank,
                                world_size=world, timeout=timedelta(seconds=180))
        import verl  # noqa: F401  (loads the verl_rfpp plugin through its entry point)

        import verl_rfpp.cpu.backend  # noqa: F401  (the CPU platform and patches, as VERL_USE_EXTERNAL_MODULES does)

        _torch_padding_for_verl_without_a_cpu_fallback()
        from verl.workers.engine.base import BaseEngine

        from verl_rfpp import plugin

        # the plugin wrapped BaseEngine.train_batch by itself when verl's engine module loaded
        hooked = bool(getattr(BaseEngine.train_batch, plugin.MARKER, False))
        (out / f"hooked-{rank}.json").write_text(json.dumps(hooked))

        for scenario in spec["scenarios"]:
            run_scenario(scenario, spec, rank, world, out)
        dist.destroy_process_group()
        (out / f"done-{rank}").write_text("ok")
    except BaseException:
        (out / f"error-{rank}.txt").write_text(traceback.format_exc())
        raise


if __name__ == "__main__":
    main()
