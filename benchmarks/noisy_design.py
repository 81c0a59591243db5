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

Only noise-free updates: the learning rate was chosen on these (every method learns the informative
prompts in every seed, the flat prompts stay near their start) before any noisy run was seen.

    python benchmarks/noisy_design.py                       # both designs, lr 5e-3 and 1e-2, 3 methods, 6 seeds
    python benchmarks/noisy_design.py --design separate --lrs 5e-3 1e-2 2e-2 3e-2 --seeds 8
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM

from verl_rfpp.curves import noisy_task

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


def run(spec: dict, design: noisy_task.Design, method: str, lr: float, steps: int, seed: int) -> dict:
    """One simulated run; the policy's informative true reward, flat entropy and flat-informative
    gap after its last step."""
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype="float32")
    start_model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype="float32")
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
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
    return {name: metrics[noisy_task.PREFIX + name]
            for name in ("informative_true_reward", "flat_entropy", "flat_informative_tv")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--design", choices=sorted(noisy_task.DESIGNS), nargs="*", default=sorted(noisy_task.DESIGNS))
    parser.add_argument("--lrs", type=float, nargs="*", default=[5e-3, 1e-2])
    parser.add_argument("--methods", nargs="*", choices=("grpo", "ours", "verl"), default=["grpo", "ours", "verl"])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=6)
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
                for method in args.methods:
                    ends = [run(spec, design, method, lr, args.steps, seed) for seed in range(args.seeds)]
                    values = {name: " ".join(f"{end[name]:.2f}" for end in ends) for name in ends[0]}
                    print(f"{key:8s} lr {lr:<6g} {method:4s} noise 0, {args.steps} steps: informative true reward "
                          f"{values['informative_true_reward']} (best {best:.2f}); flat entropy "
                          f"{values['flat_entropy']}; gap {values['flat_informative_tv']}", flush=True)


if __name__ == "__main__":
    main()
