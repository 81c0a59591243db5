"""One optimizer step of verl's real actor update gives the contract's gradient (docs/contract.md
section 5), at every batch shape a verl user trains with.

The real path, per data-parallel rank (tests/support/gradient_worker.py): verl's trainer code
``RayPPOTrainer._update_actor`` (both trainers' actor update goes through verl's engine worker;
it sets ``global_batch_size``, the mini-batch size, the epochs, and packs the batch to verl's
no-padding layout) -> verl's dispatch chunk -> ``ActorRolloutRefWorker.update_actor`` ->
``TrainingWorker.train_mini_batch`` (mini-batches, epochs, shuffling) -> ``BaseEngine.train_batch``
-> FSDP2 ``forward_backward_batch`` (micro-batches or dynamic batch sizes, ``use_remove_padding``
packing, the tiny Qwen2 in fp32 with sdpa attention) -> ``ppo_loss`` with our ``rfpp`` policy
loss and verl's k2 ``agg_loss`` -> backward. The gradient is read at each optimizer step.

The reference is written here from the contract in float64: each response run alone through
the same model (no packing, no padding), the clipped surrogate and k2, response mean over the
*whole* mini-batch's responses (all ranks), one backward. Agreement is measured as
``||g - g_ref|| / ||g_ref||`` over all parameters, and ``max |g - g_ref| / max |g_ref|``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from support import reference

from verl_rfpp import catalog, validation

pytestmark = pytest.mark.slow  # verl's actor workers run as processes

WORKER = Path(__file__).resolve().parents[1] / "support" / "gradient_worker.py"
TOLERANCE = 1e-5
CLIP = 0.2  # verl's default clip_ratio (low and high), which the recipe keeps
KL_COEF = 0.01  # the recipe's kl_loss_coef
PROMPT, RESPONSE = 6, 8
WORKER_TIMEOUT_S = 900  # all workers together; about a minute on two idle cores


# ------------------------------------------------------------------ the float64 reference model


def _reference_model(model_dir: Path, params: dict | None = None):
    """The tiny Qwen2 in float64, eager attention, with the given parameter values."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float64)
    if params is None:
        state = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).state_dict()
        params = {name: state[name].numpy() for name, _ in model.named_parameters()}
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(torch.from_numpy(np.asarray(params[name], dtype=np.float64)))
    model.eval()
    return model


def _response_log_probs(model, arrays: dict, row: int) -> torch.Tensor:
    """``logp_theta[row, t]`` for every response position (0 where the response has no token):
    the response alone after its prompt, no padding, positions 0..len-1."""
    prompt = arrays["prompts"][row][arrays["attention_mask"][row, :PROMPT] == 1]
    attended = arrays["attention_mask"][row, PROMPT:] == 1
    response = arrays["responses"][row][attended]
    out = torch.zeros(RESPONSE, dtype=torch.float64)
    if len(response) == 0:
        return out
    tokens = torch.from_numpy(np.concatenate([prompt, response])).long()[None]
    logits = model(input_ids=tokens, use_cache=False).logits[0]
    log_probs = torch.log_softmax(logits, dim=-1)
    positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(response))
    picked = log_probs[positions, tokens[0, len(prompt):]]
    index = torch.from_numpy(np.flatnonzero(attended))
    return out.index_put((index,), picked)


def contract_objective(model, arrays: dict, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """docs/contract.md section 5 over the whole mini-batch ``rows``, token by token:
    ``l = max(-rho * A, -clip(rho, 1 - eps, 1 + eps) * A)``, ``rho = exp(logp - logp_old)``, and
    section 3's ``D_k2``, each reduced by the response mean (rows without a valid token are not
    responses). Returns ``(policy term, k2 term, {row: logp_theta})``; the objective is
    ``policy + KL_COEF * k2``."""
    policy, k2 = [], []
    mask = []
    log_probs = {}
    for row in rows:
        logp = log_probs[row] = _response_log_probs(model, arrays, row)
        old = torch.from_numpy(arrays["old_log_probs"][row].astype(np.float64))
        ref = torch.from_numpy(arrays["ref_log_prob"][row].astype(np.float64))
        advantage = torch.from_numpy(arrays["advantages"][row].astype(np.float64))
        policy_row, k2_row = [], []
        for t in range(RESPONSE):
            rho = torch.exp(logp[t] - old[t])
            clipped = torch.clamp(rho, 1 - CLIP, 1 + CLIP)
            policy_row.append(torch.maximum(-rho * advantage[t], -clipped * advantage[t]))
            k2_row.append(reference.k2(logp[t], ref[t]))
        policy.append(policy_row), k2.append(k2_row)
        mask.append([bool(v) for v in arrays["response_mask"][row]])
    return reference.response_mean(policy, mask), reference.response_mean(k2, mask), log_probs


def contract_gradient(model_dir: Path, arrays: dict, rows: list[int], params: dict, names: list[str]):
    model = _reference_model(model_dir, params)
    policy, k2, log_probs = contract_objective(model, arrays, rows)
    (policy + KL_COEF * k2).backward()
    grads = dict(model.named_parameters())
    log_probs = {row: values.detach().numpy() for row, values in log_probs.items()}
    return {name: grads[name].grad.numpy() for name in names}, policy.item(), k2.item(), log_probs


def relative_errors(ours: dict, theirs: dict) -> tuple[float, float]:
    """``(||a - b|| / ||b||, max|a - b| / max|b|)`` over all parameters together."""
    a = np.concatenate([np.ravel(ours[name]) for name in theirs])
    b = np.concatenate([np.ravel(theirs[name]) for name in theirs])
    return float(np.linalg.norm(a - b) / np.linalg.norm(b)), float(np.abs(a - b).max() / np.abs(b).max())


# ------------------------------------------------------------------ step batches


def _step_batch(model, rows: int, rng: np.random.Generator, *, padding_rows=(), empty_rows=(),
                long_rows=(), short_rows=(), hole_rows=()) -> dict:
    """A step batch as verl's trainer holds it: left-padded prompts, right-padded responses,
    ``response_mask``, ``old_log_probs`` near the model's (so the clip binds on some tokens and
    not on others), ``ref_log_prob``, advantages. ``padding_rows`` are verl v1's synthetic rows
    (EOS prompt, one EOS response token, mask 0); ``empty_rows`` are aborted responses with no
    token at all; ``hole_rows`` have an interior mask hole (a tool-output token)."""
    eos = 0
    prompts = np.zeros((rows, PROMPT), np.int64)
    responses = np.zeros((rows, RESPONSE), np.int64)
    attention = np.zeros((rows, PROMPT + RESPONSE), np.int64)
    mask = np.zeros((rows, RESPONSE), np.int64)
    for i in range(rows):
        if i in padding_rows:
            prompts[i] = eos
            attention[i, :PROMPT + 1] = 1
            responses[i, 0] = eos
            continue
        prompt_len = int(rng.integers(2, PROMPT + 1))
        prompts[i, PROMPT - prompt_len:] = rng.integers(3, 250, prompt_len)
        attention[i, PROMPT - prompt_len:PROMPT] = 1
        if i in empty_rows:
            continue
        length = RESPONSE if i in long_rows else 1 if i in short_rows else int(rng.integers(1, RESPONSE + 1))
        responses[i, :length] = rng.integers(3, 250, length)
        attention[i, PROMPT:PROMPT + length] = 1
        mask[i, :length] = 1
        if i in hole_rows and length >= 3:
            mask[i, 1] = 0
    arrays = {
        "prompts": prompts, "responses": responses, "attention_mask": attention,
        "input_ids": np.concatenate([prompts, responses], axis=1),
        "position_ids": np.clip(np.cumsum(attention, axis=1) - 1, 0, None),
        "response_mask": mask, "row_id": np.arange(rows),
    }
    old = np.zeros((rows, RESPONSE), np.float32)
    with torch.no_grad():
        for i in range(rows):
            old[i] = _response_log_probs(model, arrays, i).numpy()
    noise = lambda scale: scale * rng.standard_normal((rows, RESPONSE))  # noqa: E731
    arrays["old_log_probs"] = ((old + noise(0.3)) * mask).astype(np.float32)
    arrays["ref_log_prob"] = ((old + noise(0.5)) * mask).astype(np.float32)
    arrays["advantages"] = (rng.standard_normal((rows, RESPONSE)) * mask).astype(np.float32)
    return arrays


def with_masked_garbage(arrays: dict) -> dict:
    """A copy of a step batch whose masked slots (interior holes, right padding, empty rows) hold
    ``-inf`` / ``1e30`` in ``ref_log_prob`` and NaN in ``old_log_probs`` and ``advantages``."""
    dirty = {key: value.copy() for key, value in arrays.items()}
    masked = arrays["response_mask"] == 0
    assert masked[:, 1:-1].any()  # an interior hole or a short response's padding
    ref = dirty["ref_log_prob"]
    ref[masked] = np.where(np.arange(masked.sum()) % 2 == 0, -np.inf, 1e30).astype(np.float32)
    dirty["old_log_probs"][masked] = np.nan
    dirty["advantages"][masked] = np.nan
    return dirty


def _overrides(n: int, prompts_per_mini_batch: int, *, micro=None, max_tokens=None, epochs=1,
               shuffle=False, lr=1e-6) -> list[str]:
    actor = "actor_rollout_ref.actor"
    out = [f"actor_rollout_ref.rollout.n={n}", f"{actor}.ppo_mini_batch_size={prompts_per_mini_batch}",
           f"{actor}.ppo_epochs={epochs}", f"{actor}.shuffle={shuffle}", f"{actor}.optim.lr={lr}"]
    if max_tokens is None:
        out += [f"{actor}.use_dynamic_bsz=False", f"{actor}.ppo_micro_batch_size_per_gpu={micro}",
                f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}"]
    else:
        out += [f"{actor}.use_dynamic_bsz=True", f"{actor}.ppo_max_token_len_per_gpu={max_tokens}",
                "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
                f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={max_tokens}"]
    return out


def _base_overrides(model_dir: Path) -> list[str]:
    """The recipe, plus what the CPU needs (as ``verl-rfpp demo``), plus real packing."""
    out = list(validation.RECIPES[catalog.REINFORCE_PLUS_PLUS_BASELINE.name])
    role = "actor_rollout_ref.actor"
    out += [f"{role}.strategy=fsdp2", f"{role}.fsdp_config.use_torch_compile=False",
            f"{role}.fsdp_config.model_dtype=fp32", f"{role}.fsdp_config.dtype=float32",
            # verl's FSDP engine computes in bf16 unless mixed_precision says otherwise
            f"+{role}.fsdp_config.mixed_precision.param_dtype=fp32",
            f"+{role}.fsdp_config.mixed_precision.reduce_dtype=fp32",
            f"+{role}.fsdp_config.mixed_precision.buffer_dtype=fp32",
            f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.model.use_remove_padding=True",
            "+actor_rollout_ref.model.override_config.attn_implementation=sdpa"]
    return out


# ------------------------------------------------------------------ running the real path


def _run_workers(directory: Path, world: int, scenarios: list[dict], model_dir: Path) -> list:
    """Start ``world`` worker processes, each logging to ``log-<rank>.txt`` (a file, not a pipe
    nobody reads while another group is joined); returns the Popen objects for ``_join``."""
    directory.mkdir(parents=True)
    spec = {"world": world, "out": str(directory), "init_file": str(directory / "rendezvous"),
            "base_overrides": _base_overrides(model_dir), "scenarios": scenarios}
    (directory / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ)
    env.pop("VERL_USE_EXTERNAL_PLUGINS", None)  # the plugin must load, as for any user
    processes = []
    for rank in range(world):
        with open(directory / f"log-{rank}.txt", "w") as log:
            processes.append(subprocess.Popen(
                [sys.executable, str(WORKER), str(directory / "spec.json"), str(rank)],
                cwd=directory, env=env, stdout=log, stderr=subprocess.STDOUT))
    return processes


def _join(directory: Path, processes: list, deadline: float) -> None:
    """Wait for every worker until ``deadline`` (``time.monotonic()``), kill what is left."""
    try:
        for process in processes:
            process.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)
    errors = sorted(directory.glob("error-*.txt"))
    if errors or any(p.returncode != 0 for p in processes):
        detail = "\n".join(e.read_text() for e in errors) or "\n".join(
            path.read_text()[-4000:] for path in sorted(directory.glob("log-*.txt")))
        raise AssertionError(f"gradient worker failed in {directory} (codes "
                             f"{[p.returncode for p in processes]}):\n{detail}")


class Scenario:
    """What the real path recorded for one scenario, and the reference per optimizer step."""

    def __init__(self, directory: Path, name: str, arrays: dict, model_dir: Path):
        summary = json.loads((directory / f"{name}.json").read_text())
        payload = np.load(directory / f"{name}.npz")
        self.metrics = summary["metrics"]
        self.steps = []
        previous = None
        for index, step in enumerate(summary["steps"]):
            names = step["names"]
            grads = {n: payload[f"{index}/grad/{n}"] for n in names}
            params = {n: payload[f"{index}/param/{n}"] for n in names}
            expected, policy, k2, log_probs = contract_gradient(model_dir, arrays, step["rows"], params, names)
            norm_error, max_error = relative_errors(grads, expected)
            log_prob_error = max(
                float(np.abs(np.asarray(step["log_probs"][str(row)]) - log_probs[row])[mask].max(initial=0.0))
                for row in step["rows"] for mask in [arrays["response_mask"][row].astype(bool)])
            moved = previous is not None and any(not np.array_equal(params[n], previous[n]) for n in names)
            previous = params
            self.steps.append({**step, "norm_error": norm_error, "max_error": max_error, "policy": policy,
                               "k2": k2, "grads": grads, "expected": expected, "moved": moved,
                               "log_prob_error": log_prob_error})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every scenario, run once through the real path: one process (dp = 1) and two (dp = 2)."""
    from verl_rfpp.cpu import assets

    root = tmp_path_factory.mktemp("gradient")
    model_dir = Path(assets.build_all(root / "assets")["model"])
    model = _reference_model(model_dir)
    rng = np.random.default_rng(11)
    data = {
        # 12 responses (3 prompts x n = 4), 3 micro-batches of 4
        "micro": _step_batch(model, 12, rng, long_rows=(0, 5), short_rows=(3, 7), hole_rows=(1,)),
        # the same shape under use_dynamic_bsz with a token budget that forces uneven micro-batches
        "dynamic": _step_batch(model, 12, rng, long_rows=(0, 1, 2, 3), short_rows=(8, 9, 10, 11)),
        # two v1 padding rows and an aborted response: 9 responses in a mini-batch of 12 rows
        "empty": _step_batch(model, 12, rng, padding_rows=(10, 11), empty_rows=(4,), long_rows=(0,),
                             short_rows=(5,)),
        # 16 rows, 2 mini-batches of 8, 2 epochs, shuffled: 4 optimizer steps that move the weights
        "epochs": _step_batch(model, 16, rng, long_rows=(0, 9), short_rows=(3, 12), padding_rows=(15,)),
        # dp = 2: rank 0 holds the long responses, rank 1 the short ones and all the empty rows
        "dp2": _step_batch(model, 16, rng, long_rows=tuple(range(8)), short_rows=(8, 9, 10),
                           padding_rows=(14, 15), empty_rows=(11,)),
        # dp = 2 with use_dynamic_bsz, 2 mini-batches, 2 epochs, shuffled
        "dp2_dynamic": _step_batch(model, 16, rng, long_rows=(0, 1, 2, 8), short_rows=(5, 6, 13),
                                   padding_rows=(15,)),
        # dp = 2, 2 mini-batches of 4 rows: rows {0, 1, 4, 5} hold N = 1 response (fewer than the
        # ranks; rank 1's half none at all), rows {2, 3, 6, 7} hold N = 3
        "dp2_few": _step_batch(model, 8, rng, padding_rows=(4, 5, 7), empty_rows=(1,), long_rows=(0,),
                               short_rows=(6,)),
    }
    # the "micro" batch with garbage in every masked slot of the inputs ppo_loss reads (-inf and
    # 1e30 in ref_log_prob: float32 squares overflow; NaN in old_log_probs and advantages)
    data["garbage"] = with_masked_garbage(data["micro"])
    for name, arrays in data.items():
        np.savez(root / f"{name}.data.npz", **arrays)
    single = [
        {"name": "micro", "overrides": _overrides(4, 3, micro=4)},
        {"name": "dynamic", "overrides": _overrides(4, 3, max_tokens=28)},
        {"name": "empty", "overrides": _overrides(4, 3, micro=4)},
        {"name": "empty_verl_denominator", "data_name": "empty", "fix": False,
         "overrides": _overrides(4, 3, micro=4)},
        {"name": "epochs", "overrides": _overrides(4, 2, micro=4, epochs=2, shuffle=True, lr=1e-2)},
        {"name": "masked_garbage", "data_name": "garbage", "reference_name": "micro",
         "overrides": _overrides(4, 3, micro=4)},
        {"name": "empty_vanilla", "data_name": "empty",
         "overrides": _overrides(4, 3, micro=4) + ["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"]},
    ]
    double = [
        {"name": "dp2", "overrides": _overrides(4, 4, micro=2)},
        {"name": "dp2_dynamic", "overrides": _overrides(4, 2, max_tokens=16, epochs=2, shuffle=True, lr=1e-2)},
        {"name": "dp2_few", "overrides": _overrides(4, 1, micro=2)},
    ]
    for scenario in single + double:
        scenario["data"] = str(root / f"{scenario.get('data_name', scenario['name'])}.data.npz")
    deadline = time.monotonic() + WORKER_TIMEOUT_S
    one = _run_workers(root / "dp1", 1, single, model_dir)
    two = _run_workers(root / "dp2", 2, double, model_dir)
    _join(root / "dp1", one, deadline)
    _join(root / "dp2", two, deadline)
    results = {}
    for directory, scenarios in ((root / "dp1", single), (root / "dp2", double)):
        for scenario in scenarios:
            arrays = data[scenario.get("reference_name", scenario.get("data_name", scenario["name"]))]
            results[scenario["name"]] = Scenario(directory, scenario["name"], arrays, model_dir)
    results["_root"] = root
    return results


def _assert_contract(scenario: Scenario) -> None:
    """Every optimizer step: the real log-probs (packed, FSDP) are the per-response ones, and the
    accumulated gradient is the contract's over the whole mini-batch."""
    for index, step in enumerate(scenario.steps):
        assert step["log_prob_error"] <= TOLERANCE, (index, step["log_prob_error"])
        assert step["norm_error"] <= TOLERANCE and step["max_error"] <= TOLERANCE, (
            f"optimizer step {index} (rows {step['rows']}): relative error {step['norm_error']:.3g} "
            f"(norm), {step['max_error']:.3g} (max)")


def _assert_logged_losses(scenario: Scenario) -> None:
    """verl's logged ``actor/pg_loss`` and ``actor/kl_loss`` per optimizer step are the contract's
    two terms (the mini-batch's response means). verl sums the micro-batches' float32 partial
    values, so the tolerance is relative to 0.1 when the mean itself nearly cancels."""
    for index, step in enumerate(scenario.steps):
        for key, expected in (("actor/pg_loss", step["policy"]), ("actor/kl_loss", step["k2"])):
            logged = scenario.metrics[key][index]
            assert abs(logged - expected) <= TOLERANCE * max(abs(expected), 0.1), (key, index, logged, expected)


def test_dp1_micro_batches_accumulate_the_mini_batch_gradient(runs):
    scenario = runs["micro"]
    assert len(scenario.steps) == 1
    assert scenario.steps[0]["micro"] == [[4, 4, 4]]  # one rank, 3 micro-batches of 4
    _assert_contract(scenario)
    _assert_logged_losses(scenario)


def test_masked_garbage_in_the_loss_inputs_changes_no_gradient(runs):
    """NaN, -inf and 1e30 in the masked slots of ``ref_log_prob`` (verl's k2 term multiplies by the
    mask), ``old_log_probs`` and ``advantages``: the logged losses and the gradient are the
    contract's, computed from the clean batch (docs/contract.md section 1.3)."""
    scenario = runs["masked_garbage"]
    assert all(np.isfinite(value).all() for value in scenario.steps[0]["grads"].values())
    _assert_contract(scenario)
    _assert_logged_losses(scenario)


def test_dp1_dynamic_batch_size_with_uneven_micro_batches(runs):
    scenario = runs["dynamic"]
    (micro,) = scenario.steps[0]["micro"]
    assert len(micro) >= 3 and len(set(micro)) > 1 and sum(micro) == 12, micro
    _assert_contract(scenario)
    _assert_logged_losses(scenario)


def test_rows_without_a_valid_token_do_not_change_the_weights_of_responses(runs):
    scenario = runs["empty"]
    step = scenario.steps[0]
    assert step["global_batch_size"] == 9  # 12 rows, of which 9 are responses
    _assert_contract(scenario)
    _assert_logged_losses(scenario)


def test_verl_own_denominator_shrinks_the_gradient_by_the_share_of_empty_rows(runs):
    """Without the response count (verl's ``global_batch_size = ppo_mini_batch_size * n``) the
    gradient is the contract's times 9/12: the test above can fail, and this is the size of it."""
    scenario = runs["empty_verl_denominator"]
    step = scenario.steps[0]
    assert step["global_batch_size"] == 12
    scaled = {name: value * 9 / 12 for name, value in step["expected"].items()}
    assert relative_errors(step["grads"], scaled)[0] <= TOLERANCE
    assert step["norm_error"] == pytest.approx(0.25, rel=1e-3)


def test_the_plugin_wraps_the_engine_when_verl_loads_it(runs):
    """In every worker process, importing verl's engine (as verl's workers do) installed the
    response count without any call of ours."""
    hooked = [json.loads(path.read_text()) for path in sorted(runs["_root"].glob("dp*/hooked-*.json"))]
    assert hooked == [True, True, True]


def test_other_policy_losses_keep_verl_own_denominator(runs):
    """The response count applies to the ``rfpp`` actor loss only: with verl's ``vanilla`` the
    engine sees verl's ``global_batch_size`` untouched."""
    assert runs["empty_vanilla"].steps[0]["global_batch_size"] == 12


def test_each_optimizer_step_gets_its_own_mini_batch_over_epochs(runs):
    scenario = runs["epochs"]
    assert len(scenario.steps) == 4  # 2 mini-batches x 2 epochs
    for epoch in (scenario.steps[:2], scenario.steps[2:]):
        assert sorted(epoch[0]["rows"] + epoch[1]["rows"]) == list(range(16))
    assert scenario.steps[0]["rows"] != sorted(scenario.steps[0]["rows"])  # shuffled
    assert all(step["moved"] for step in scenario.steps[1:])  # each step starts from new weights
    _assert_contract(scenario)
    _assert_logged_losses(scenario)


def test_dp2_ranks_together_give_the_whole_mini_batch_gradient(runs):
    scenario = runs["dp2"]
    step = scenario.steps[0]
    assert sorted(step["rows"]) == list(range(16)) and step["global_batch_size"] == 13
    assert step["micro"] == [[2, 2, 2, 2], [2, 2, 2, 2]]
    _assert_contract(scenario)
    _assert_logged_losses(scenario)


def test_dp2_dynamic_batch_size_and_epochs(runs):
    scenario = runs["dp2_dynamic"]
    assert len(scenario.steps) == 4
    for epoch in (scenario.steps[:2], scenario.steps[2:]):
        assert sorted(epoch[0]["rows"] + epoch[1]["rows"]) == list(range(16))
    for step in scenario.steps:  # verl gives both ranks the same number of micro-batches
        assert len(step["micro"][0]) == len(step["micro"][1]) and sum(map(sum, step["micro"])) == 8
    assert any(len(set(ranks)) > 1 for step in scenario.steps for ranks in step["micro"])  # uneven
    _assert_contract(scenario)
    _assert_logged_losses(scenario)


def test_dp2_fewer_responses_than_ranks(runs):
    """N = 1 response in a mini-batch over dp = 2 ranks: each rank divides both terms by N / dp
    = 1/2 (verl's k2 ``agg_loss`` always did; the policy term divided by max(N / dp, 1) = 1 and
    its gradient was half the contract's). The next mini-batch, N = 3, is uneven over the ranks."""
    scenario = runs["dp2_few"]
    assert [sorted(step["rows"]) for step in scenario.steps] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert [step["global_batch_size"] for step in scenario.steps] == [1, 3]
    _assert_contract(scenario)
    _assert_logged_losses(scenario)
