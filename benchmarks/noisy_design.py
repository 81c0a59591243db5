"""How the noisy task's `separate` design and learning rate were chosen (docs/curves/noisy/report.md,
"The model and the schedule"): verl's update on the task, replayed in one process on the task's own
model, prompts and qualities, noise-free, for each design, learning rate and method, over seeds.

Not verl: one process, no Ray, no rollout server. What it keeps of the trainer's step (the CPU
backend's recipe): every prompt of a step sampled `samples` times from the policy (temperature 1,
one-token answers), the method's advantages (GRPO: group minus its mean over the group's unbiased
std plus 1e-6; REINFORCE++-baseline: group-centred, then whitened over the batch by the population
std, ours, or the unbiased one plus 1e-8, verl's), one AdamW step (weight decay 0.01) on the mean
over responses of `-A log pi + 0.01 * k2` (k2 against the start model), the gradient's norm clipped
at 1. The numbers it prints are a simulation's; the report's numbers are verl's runs.

The learning rate was chosen on noise-free updates (every method learns the informative prompts in
every seed, the flat prompts stay near their start) before any noisy run was seen. `--noise-std`
and `--optimizer sgd` came after verl's noisy runs, to ask why they came out as they did (the
report's "Why", an explanation, not a measurement of verl): the same noise model as the task
(N(0, noise_std^2) added to each sample's reward, from a stream of its own per seed), and plain SGD
(the bandit's update, docs/bandit.md) in place of AdamW; it prints how far each kind's own
input-embedding rows moved (the rows only that kind's samples train, in design `separate`).

    python benchmarks/noisy_design.py                       # both designs, lr 5e-3 and 1e-2, 3 methods, 6 seeds
    python benchmarks/noisy_design.py --design separate --lrs 5e-3 1e-2 2e-2 3e-2 --seeds 8
    python benchmarks/noisy_design.py --design separate --lrs 5e-3 --seeds 5 --noise-std 0.1
    python benchmarks/noisy_design.py --design separate --optimizer sgd --lrs 1 --seeds 5 --noise-std 0 0.1
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM

from verl_rfpp.experiments.noisy import task as noisy_task

KL_COEF, WEIGHT_DECAY, GRAD_CLIP, EPSILON = 0.01, 0.01, 1.0, {"grpo": 1e-6, "verl": 1e-8}


def advantages(method: str, rewards: torch.Tensor, samples: int) -> torch.Tensor:
    """One advantage per response, ``rewards`` in groups of ``samples`` consecutive responses."""
    groups = rewards.view(-1, samples)
    centred = groups - groups.mean(dim=1, keepdim=True)
    if method == "grpo":
        return (centred / (groups.std(dim=1, keepdim=True) + EPSILON["grpo"])).view(-1)
    flat = centred.view(-1)
    if method == "ours":
        return (flat - flat.mean()) / flat.std(correction=0).clamp_min(1e-8)
    return (flat - flat.mean()) / (flat.std(correction=1) + EPSILON["verl"])


def run(spec: dict, design: noisy_task.Design, method: str, lr: float, steps: int, seed: int,
        noise_std: float = 0.0, optimizer_name: str = "adamw") -> dict:
    """One simulated run; the policy's informative true reward, flat entropy, flat KL from the start
    and flat-informative gap after its last step."""
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype="float32")
    start_model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype="float32")
    if optimizer_name == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    noise = torch.Generator().manual_seed(10_000 + seed)
    rows = {"informative": [r for r in spec["prompts"] if r["kind"] == "informative"],
            "flat": [r for r in spec["prompts"] if r["kind"] == "flat"]}
    order, sampler = random.Random(1_000 + seed), torch.Generator().manual_seed(seed)
    half = design.prompts_per_step // 2
    for _ in range(steps):
        block = [*order.sample(rows["informative"], half), *order.sample(rows["flat"], half)]
        batch = [row for row in block for _ in range(design.samples)]
        ids = torch.tensor([row["ids"] for row in batch])
        log_probs = torch.log_softmax(model(input_ids=ids).logits[:, -1], dim=-1)
        with torch.no_grad():
            answers = torch.multinomial(log_probs.exp(), 1, generator=sampler).squeeze(1)
            rewards = torch.tensor([row["quality"][a] for row, a in zip(batch, answers.tolist(), strict=True)],
                                   dtype=torch.float64)
            rewards += noise_std * torch.randn(len(batch), generator=noise, dtype=torch.float64)
            advantage = advantages(method, rewards, design.samples).float()
            start_log_probs = torch.log_softmax(start_model(input_ids=ids).logits[:, -1], dim=-1)
        chosen = log_probs.gather(1, answers[:, None]).squeeze(1)
        reference = start_log_probs.gather(1, answers[:, None]).squeeze(1)
        loss = (-advantage * chosen + KL_COEF * 0.5 * (chosen - reference) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
    probs = noisy_task.answer_distributions(model, [row["ids"] for row in spec["prompts"]])
    metrics = noisy_task.policy_metrics(spec, probs)
    ends = {name: metrics[noisy_task.PREFIX + name]
            for name in ("informative_true_reward", "flat_entropy", "flat_kl_from_start", "flat_informative_tv")}
    with torch.no_grad():  # how far each kind's own input-embedding rows (its last prompt token's) moved
        moved = (model.get_input_embeddings().weight - start_model.get_input_embeddings().weight).norm(dim=1)
        for kind, kind_rows in rows.items():
            ends[f"{kind}_row_move"] = moved[[row["ids"][-1] for row in kind_rows]].mean().item()
    return ends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--design", choices=sorted(noisy_task.DESIGNS), nargs="*", default=sorted(noisy_task.DESIGNS))
    parser.add_argument("--lrs", type=float, nargs="*", default=[5e-3, 1e-2])
    parser.add_argument("--methods", nargs="*", choices=("grpo", "ours", "verl"), default=["grpo", "ours", "verl"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--noise-std", type=float, nargs="*", default=[0.0])
    parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    args = parser.parse_args()
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as root:
        for key in args.design:
            design = noisy_task.DESIGNS[key]
            spec = noisy_task.build_assets(Path(root) / key, design)
            informative = [row for row in spec["prompts"] if row["kind"] == "informative"]
            best = sum(max(row["quality"]) for row in informative) / len(informative)
            for lr in args.lrs:
                for noise_std in args.noise_std:
                    for method in args.methods:
                        ends = [run(spec, design, method, lr, args.steps, seed, noise_std, args.optimizer)
                                for seed in range(args.seeds)]
                        values = {name: " ".join(f"{end[name]:.2f}" for end in ends) for name in ends[0]}
                        print(f"{key:8s} {args.optimizer} lr {lr:<6g} {method:4s} noise {noise_std:g}, {args.steps} "
                              f"steps: informative true reward {values['informative_true_reward']} (best {best:.2f}); "
                              f"flat entropy {values['flat_entropy']}; flat KL {values['flat_kl_from_start']}; "
                              f"gap {values['flat_informative_tv']}; embedding rows moved: flat "
                              f"{values['flat_row_move']}, informative {values['informative_row_move']}", flush=True)


if __name__ == "__main__":
    main()
