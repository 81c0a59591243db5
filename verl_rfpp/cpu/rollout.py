"""A token-in/token-out rollout backend around transformers ``generate`` (CPU), registered as
``actor_rollout_ref.rollout.name=hf_cpu``: a ``RolloutReplica`` that starts one server actor, the
server actor, and the worker-side adapter that pushes the actor's weights to it after each update.

Each request samples from a random stream of its own, seeded from the run's seed, the trainer step
of the loaded weights, the request's id and its turn (``request_seed``), never from the order in
which requests arrive (docs/cpu-backend.md, "Same seed, same run")."""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any, Generator, Optional

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from verl_rfpp.cpu import trace

logger = logging.getLogger("verl_rfpp")

TURN_TOKENS = 4  # the most tokens of one assistant turn in multi-turn runs


def server_name(replica_rank: int) -> str:
    return f"rfpp_hf_cpu_server_{replica_rank}_{ray.get_runtime_context().get_job_id()}"


def request_seed(seed: int, global_steps: int, request_id: str, turn: int) -> int:
    """The seed of one request's sampling: a function of the run's seed and the request's identity
    only. The request id is its agent-loop session's identity (``patches._identified_sessions``:
    step, the prompt's dataset index, sample and session); a session's turns share it, so ``turn``
    (0, 1, ... in the order the session sends them) tells them apart."""
    key = f"{seed}:{global_steps}:{request_id}:{turn}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "little") & (2**63 - 1)


def weights_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """sha256 over the parameters in name order (each name, dtype, shape and raw bytes): equal
    digests mean bit-identical weights."""
    digest = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def _next_token_probs(model, prompts: list[list[int]]) -> list[list[float]]:
    """The softmax of ``model``'s next-token logits after each prompt, in float64."""
    with torch.no_grad():
        return [torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].double(), dim=-1).tolist()
                for ids in prompts]


class HFRolloutServer:
    """Holds a transformers causal LM and samples from it; weights arrive through ``load_weights``."""

    def __init__(self, model_path: str, prompt_length: int, response_length: int, seed: int = 0,
                 turn_tokens: Optional[int] = None):
        from transformers import AutoModelForCausalLM

        torch.manual_seed(seed)
        self.seed, self.model_path = seed, model_path
        self._start_model = None  # the weights at model_path, loaded on counterfactual_probs' first call
        self.model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32,
                                                          attn_implementation="sdpa").eval()
        self.prompt_length, self.response_length = prompt_length, response_length
        # multi-turn: one assistant turn may not fill the whole response, or no tool turn fits
        self.turn_tokens = turn_tokens or response_length
        self.global_steps = 0  # the trainer step whose weights are loaded (verl's staleness metrics)
        self.turns: dict[str, int] = {}  # request id -> turns sampled under the loaded weights

    def load_weights(self, state_dict: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> int:
        missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
        real_missing = [name for name in missing if not name.endswith("lm_head.weight")]
        if real_missing or unexpected:
            raise RuntimeError(f"weight sync mismatch: missing {real_missing}, unexpected {unexpected}")
        if global_steps is not None:
            self.global_steps = global_steps
        self.turns = {}
        if os.environ.get(trace.TRACE_ENV):
            checksum = sum(float(t.double().abs().sum()) for t in state_dict.values())
            trace.write("weights", global_steps=self.global_steps, abs_sum=f"{checksum:.12g}",
                        sha256=weights_digest(state_dict))
        return self.global_steps

    def next_token_probs(self, prompts: list[list[int]]) -> tuple[int, list[list[float]]]:
        """``(global_steps, [softmax of the next-token logits after each prompt])`` under the loaded
        weights: the exact distribution of a one-token answer at temperature 1 (a metrics probe's read)."""
        return self.global_steps, _next_token_probs(self.model, prompts)

    def counterfactual_probs(self, prompts: list[list[int]],
                             rows: list[int]) -> tuple[int, dict[str, list[list[float]]]]:
        """``(global_steps, {"rows_reset": ..., "shared_reset": ...})``: ``next_token_probs`` of two
        models mixed from the loaded weights and the start's (``model_path``): the loaded weights with
        the input-embedding ``rows`` at their start values, and the start weights with those rows at
        their loaded values. Reads only: the loaded model and every random stream are left as they were."""
        import copy

        from transformers import AutoModelForCausalLM

        with torch.random.fork_rng(devices=[]), torch.no_grad():
            if self._start_model is None:
                self._start_model = AutoModelForCausalLM.from_pretrained(
                    self.model_path, torch_dtype=torch.float32, attn_implementation="sdpa").eval()
            index = torch.tensor(rows, dtype=torch.long)
            rows_reset, shared_reset = copy.deepcopy(self.model), copy.deepcopy(self._start_model)
            rows_reset.get_input_embeddings().weight[index] = self._start_model.get_input_embeddings().weight[index]
            shared_reset.get_input_embeddings().weight[index] = self.model.get_input_embeddings().weight[index]
            probs = {"rows_reset": _next_token_probs(rows_reset, prompts),
                     "shared_reset": _next_token_probs(shared_reset, prompts)}
        return self.global_steps, probs

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        params = dict(sampling_params)
        max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", self.response_length))
        max_tokens = max(1, min(max_tokens, self.response_length, self.turn_tokens))
        temperature = float(params.get("temperature", 1.0) or 0.0)
        eos = self.model.config.eos_token_id
        generation = {"do_sample": temperature > 0, "max_new_tokens": max_tokens, "eos_token_id": eos,
                      "pad_token_id": eos, "return_dict_in_generate": True, "output_scores": True}
        if temperature > 0:
            generation.update(temperature=temperature, top_p=float(params.get("top_p", 1.0)),
                              top_k=int(params.get("top_k", 0)) if int(params.get("top_k", -1)) > 0 else 0)
        turn = self.turns.get(request_id, 0)
        self.turns[request_id] = turn + 1
        # transformers' generate draws from torch's default generator: seeded per request and
        # restored after. No other request draws in between: generate runs to its end on the
        # actor's one event-loop thread (no await inside).
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(request_seed(self.seed, self.global_steps, request_id, turn))
            out = self.model.generate(input_ids=torch.tensor([prompt_ids]), **generation)
        tokens = out.sequences[0, len(prompt_ids):].tolist()
        if eos in tokens:
            tokens = tokens[: tokens.index(eos) + 1]
        log_probs = None
        if params.get("logprobs"):
            log_probs = [torch.log_softmax(score[0].float(), dim=-1)[token].item()
                         # tokens are cut after the first eos; scores may run on
                         for score, token in zip(out.scores, tokens, strict=False)]
        return TokenOutput(token_ids=tokens, log_probs=log_probs, stop_reason="completed",
                           extra_fields={"global_steps": self.global_steps})

    # Control methods the trainer calls on every server; nothing to do on the CPU.
    async def wake_up(self): return None
    async def sleep(self): return None
    async def abort_all_requests(self, reject_request: bool = False): return {}
    async def resume_generation(self): return None
    async def clear_kv_cache(self): return None
    async def release_kv_cache(self): return None
    async def resume_kv_cache(self): return None
    async def start_profile(self, **kwargs): return None
    async def stop_profile(self): return None
    async def wait_for_requests_to_drain(self): return None


class HFReplica(RolloutReplica):
    """One CPU server actor per replica, named so the hybrid workers' adapters can find it."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self):
        server = ray.remote(HFRolloutServer).options(
            name=server_name(self.replica_rank), num_cpus=0.1, max_concurrency=self.max_concurrency,
        ).remote(str(self.model_config.path), self.config.prompt_length, self.config.response_length,
                 int(self.config.get("seed", 0) or 0), TURN_TOKENS if self.config.multi_turn.enable else None)
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"ray-actor:{server_name(self.replica_rank)}"


class HFServerAdapter(BaseRollout):
    """Worker side: pushes the actor's full weights to the replica's server after each update."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % world
        self._server: Optional[ray.actor.ActorHandle] = None

    async def resume(self, tags: list[str]):
        return None

    async def release(self):
        return None

    async def update_weights(self, weights: Generator, wire_format: str = "named_tensors", **kwargs):
        state_dict = {}
        for name, tensor in weights:
            if hasattr(tensor, "full_tensor"):
                tensor = tensor.full_tensor()
            state_dict[name] = tensor.detach().to("cpu", torch.float32).clone()
        if self.rollout_rank != 0:
            return
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        await self._server.load_weights.remote(state_dict, kwargs.get("global_steps"))
