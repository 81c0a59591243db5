"""The four experiments of ``verl-rfpp bandit``; each returns plain data for results.json."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
import torch

from verl_rfpp import losses
from verl_rfpp.bandit.env import TabularBandit, advantages_from, draw_batch, entropy, sgd_step

GRPO, RLOO = "grpo", "rloo"
RFPP, BASELINE = "reinforce_plus_plus", "reinforce_plus_plus_baseline"
# (prompts per step, samples per prompt): every method sees 256 samples per step
BATCH_SHAPE = {GRPO: (32, 8), RLOO: (32, 8), BASELINE: (32, 8), RFPP: (256, 1)}


@dataclass(frozen=True)
class Scale:
    """How big a run is: the full one or ``--quick``."""

    seeds: int
    noise_steps: int
    binary_steps: int
    learning_rates: tuple[float, ...]
    bias_trials: int


FULL = Scale(seeds=5, noise_steps=100, binary_steps=60, learning_rates=(3.0, 10.0, 30.0, 100.0), bias_trials=4000)
QUICK = Scale(seeds=2, noise_steps=20, binary_steps=15, learning_rates=(3.0, 30.0), bias_trials=300)


def estimator(name: str) -> Callable:
    """The advantage estimator verl's registry resolves ``name`` to (ours for REINFORCE++)."""
    from verl.trainer.ppo import core_algos

    return core_algos.get_adv_estimator_fn(name)


def train(env: TabularBandit, method: str, lr: float, steps: int, seed: int,
          track: Callable[[torch.Tensor], dict]) -> list[dict]:
    """On-policy training from zero logits; ``track(logits)`` after every step."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.zeros(env.quality.shape, dtype=torch.float64)
    fn = estimator(method)
    prompts_per_step, samples = BATCH_SHAPE[method]
    curve = []
    for _ in range(steps):
        prompt_ids, answers = draw_batch(logits, prompts_per_step, samples, generator)
        rewards = env.rewards(prompt_ids, answers, generator)
        advantages = advantages_from(fn, rewards, prompt_ids)
        logits = sgd_step(logits, prompt_ids, answers, advantages, lr)
        curve.append(track(logits))
    return curve


def noise_environment(seed: int, prompts: int = 256, answers: int = 10, noise_std: float = 0.1):
    """Half the prompts flat (every quality 0), half informative (qualities ~ N(0, 1))."""
    generator = torch.Generator().manual_seed(10_000 + seed)
    quality = torch.zeros(prompts, answers, dtype=torch.float64)
    informative = torch.arange(prompts) >= prompts // 2
    quality[informative] = torch.randn(int(informative.sum()), answers, generator=generator, dtype=torch.float64)
    return TabularBandit(quality, noise_std), informative


def noise_amplification(scale: Scale, progress: Optional[Callable] = None) -> dict:
    """Experiment 1: quality on informative prompts, entropy on flat ones, per method and lr."""
    methods = (GRPO, BASELINE, RFPP)
    results: dict = {"methods": {}, "curves": {}, "best_quality": 0.0, "initial_flat_entropy": math.log(10)}
    best = []
    for method in methods:
        results["methods"][method], results["curves"][method] = {}, {}
        for lr in scale.learning_rates:
            qualities, entropies, curves = [], [], []
            for seed in range(scale.seeds):
                env, informative = noise_environment(seed)
                if method == methods[0] and lr == scale.learning_rates[0]:
                    best.append(env.quality[informative].max(dim=-1).values.mean().item())

                def track(logits, env=env, informative=informative):
                    return {
                        "quality": env.expected_quality(logits)[informative].mean().item(),
                        "flat_entropy": entropy(logits)[~informative].mean().item(),
                    }

                curve = train(env, method, lr, scale.noise_steps, seed, track)
                qualities.append(curve[-1]["quality"])
                entropies.append(curve[-1]["flat_entropy"])
                curves.append(curve)
                if progress:
                    progress()
            results["methods"][method][str(lr)] = {
                "quality": float(np.mean(qualities)),
                "flat_entropy": float(np.mean(entropies)),
            }
            results["curves"][method][str(lr)] = {
                key: np.mean([[point[key] for point in curve] for curve in curves], axis=0).tolist()
                for key in ("quality", "flat_entropy")
            }
    results["best_quality"] = float(np.mean(best))
    return results


def binary_environment(seed: int, prompts: int = 256, answers: int = 10) -> TabularBandit:
    """One correct answer per prompt: reward 1, else 0, no noise."""
    generator = torch.Generator().manual_seed(20_000 + seed)
    quality = torch.zeros(prompts, answers, dtype=torch.float64)
    quality[torch.arange(prompts), torch.randint(0, answers, (prompts,), generator=generator)] = 1.0
    return TabularBandit(quality, 0.0)


def binary_rewards(scale: Scale, progress: Optional[Callable] = None) -> dict:
    """Experiment 2: final expected pass rate, learning rate tuned per method on the grid."""
    results: dict = {}
    for method in (GRPO, RLOO, BASELINE, RFPP):
        per_lr = {}
        for lr in scale.learning_rates:
            finals = []
            for seed in range(scale.seeds):
                env = binary_environment(seed)
                curve = train(env, method, lr, scale.binary_steps, seed,
                              lambda logits, env=env: env.expected_quality(logits).mean().item())
                finals.append(curve[-1])
                if progress:
                    progress()
            per_lr[str(lr)] = float(np.mean(finals))
        best_lr = max(per_lr, key=per_lr.get)
        results[method] = {"best_lr": best_lr, "pass_rate": per_lr[best_lr], "by_lr": per_lr}
    return results


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    denominator = a.norm() * b.norm()
    return float((a @ b) / denominator) if denominator > 0 else float("nan")


def kl_estimators(distances=(0.1, 0.3, 1.0, 2.0, 4.0), tokens: int = 5) -> dict:
    """Experiment 3: expected gradients of k1/k2/k3 used as losses, by exact enumeration (float64).

    For a sample x ~ pi, an estimator ``k(x)`` used as a loss contributes ``grad k(x)``; its
    expectation is ``sum_x pi(x) * grad k(x)`` with ``pi(x)`` held fixed.
    """
    from verl.trainer.ppo.core_algos import kl_penalty

    generator = torch.Generator().manual_seed(0)
    direction = torch.randn(tokens, generator=generator, dtype=torch.float64)
    direction /= direction.norm()
    ref_logits = torch.randn(tokens, generator=generator, dtype=torch.float64)
    ref_log = torch.log_softmax(ref_logits, dim=0)
    out = {key: [] for key in ("distance", "k2_vs_reverse_cos", "k2_vs_reverse_norm_ratio", "k3_vs_forward_cos",
                               "k3_vs_reverse_cos", "k3_vs_reverse_norm_ratio", "k1_grad_norm")}
    far = {}
    for distance in distances:
        logits = (ref_logits + distance * direction).requires_grad_(True)
        log_pi = torch.log_softmax(logits, dim=0)
        pi = log_pi.exp()
        reverse = torch.autograd.grad((pi * (log_pi - ref_log)).sum(), logits, retain_graph=True)[0]
        forward = torch.autograd.grad((ref_log.exp() * (ref_log - log_pi)).sum(), logits, retain_graph=True)[0]
        per_sample = {
            "k1": log_pi - ref_log,
            "k2": losses.k2_penalty(log_pi, ref_log),
            "k3": kl_penalty(log_pi, ref_log, "low_var_kl"),
        }
        grads = {
            name: torch.stack([torch.autograd.grad(values[x], logits, retain_graph=True)[0] for x in range(tokens)])
            for name, values in per_sample.items()
        }
        weights = pi.detach()[:, None]
        expected = {name: (weights * g).sum(dim=0) for name, g in grads.items()}
        out["distance"].append(distance)
        out["k2_vs_reverse_cos"].append(_cosine(expected["k2"], reverse))
        out["k2_vs_reverse_norm_ratio"].append(float(expected["k2"].norm() / reverse.norm()))
        out["k3_vs_forward_cos"].append(_cosine(expected["k3"], forward))
        out["k3_vs_reverse_cos"].append(_cosine(expected["k3"], reverse))
        out["k3_vs_reverse_norm_ratio"].append(float(expected["k3"].norm() / reverse.norm()))
        out["k1_grad_norm"].append(float(expected["k1"].norm()))
        far = {
            name: float((weights * (grads[name] - expected[name]).square()).sum())
            for name in ("k2", "k3")
        }
    out["k2_sample_var"] = far["k2"]
    out["k3_sample_var"] = far["k3"]
    out["far_distance"] = distances[-1]
    return out


def normalization_bias(scale: Scale, p: float = 0.3, group_sizes=(2, 4, 8), groups_per_batch=(1, 4, 16, 64),
                       progress: Optional[Callable] = None) -> dict:
    """Experiment 4: Monte-Carlo E[advantage | own reward] for Bernoulli(p) rewards.

    ``per_group``: verl's GRPO (standardized within each group); ``global``: our
    REINFORCE++-baseline (group-centred, then normalized over the batch). A one-token response
    per sample, so token and response weights agree.
    """
    generator = torch.Generator().manual_seed(1)
    results: dict = {"p": p, "per_group": {}, "global": {}}
    for name, method in (("per_group", GRPO), ("global", BASELINE)):
        fn = estimator(method)
        for k in group_sizes:
            rows = {}
            for groups in groups_per_batch:
                sums = {0: 0.0, 1: 0.0}
                counts = {0: 0, 1: 0}
                trials = max(1, scale.bias_trials // groups)
                for _ in range(trials):
                    rewards = (torch.rand(groups * k, generator=generator) < p).to(torch.float64)
                    prompt_ids = torch.arange(groups).repeat_interleave(k)
                    advantages = advantages_from(fn, rewards, prompt_ids)
                    for outcome in (0, 1):
                        chosen = rewards == outcome
                        sums[outcome] += advantages[chosen].sum().item()
                        counts[outcome] += int(chosen.sum())
                rows[str(groups * k)] = {
                    f"given_{outcome}": sums[outcome] / counts[outcome] if counts[outcome] else float("nan")
                    for outcome in (0, 1)
                }
                if progress:
                    progress()
            results[name][str(k)] = rows
    return results
