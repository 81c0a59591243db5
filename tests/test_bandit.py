"""The bandit's environment, sampler and update on known answers; the --quick run's schema."""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import torch

from verl_rfpp.bandit import env as bandit_env


def test_surrogate_gradient_is_the_exact_policy_gradient_of_a_two_answer_bandit():
    logits = torch.tensor([[0.3, -0.4]], dtype=torch.float64, requires_grad=True)
    quality = torch.tensor([[1.0, 0.25]], dtype=torch.float64)
    pi = torch.softmax(logits, dim=-1)
    objective = (pi * quality).sum()
    (exact,) = torch.autograd.grad(objective, logits)
    # both answers "sampled" once, each weighted by its probability: sum_a pi_a (q_a - J) grad log pi_a = grad J;
    # the response mean divides by the 2 responses, so advantages carry a factor 2.
    pi = pi.detach()[0]
    advantages = 2 * pi * (quality[0] - objective.detach())
    gradient = bandit_env.surrogate_gradient(logits.detach(), torch.tensor([0, 0]), torch.tensor([0, 1]), advantages)
    assert torch.allclose(gradient, -exact, rtol=0, atol=1e-15)
    stepped = bandit_env.sgd_step(logits.detach(), torch.tensor([0, 0]), torch.tensor([0, 1]), advantages, lr=0.5)
    assert torch.allclose(stepped, logits.detach() + 0.5 * exact, rtol=0, atol=1e-15)


def test_inverse_cdf_sampler_picks_the_known_answers():
    logits = torch.log(torch.tensor([[0.1, 0.2, 0.7]], dtype=torch.float64))
    uniforms = torch.tensor([0.05, 0.1 - 1e-9, 0.25, 0.31, 0.99], dtype=torch.float64)
    answers = bandit_env.sample_answers(logits, torch.zeros(5, dtype=torch.long), uniforms)
    assert answers.tolist() == [0, 0, 1, 2, 2]


def test_environment_rewards_quality_and_entropy():
    quality = torch.tensor([[0.0, 0.0], [1.0, -1.0]], dtype=torch.float64)
    clean = bandit_env.TabularBandit(quality, 0.0)
    g = torch.Generator().manual_seed(0)
    assert clean.rewards(torch.tensor([1, 1]), torch.tensor([0, 1]), g).tolist() == [1.0, -1.0]
    noisy = bandit_env.TabularBandit(quality, 0.1)
    draws = noisy.rewards(torch.ones(20_000, dtype=torch.long), torch.zeros(20_000, dtype=torch.long), g)
    assert abs(draws.mean().item() - 1.0) < 0.005 and abs(draws.std().item() - 0.1) < 0.005
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]], dtype=torch.float64)
    assert torch.allclose(clean.expected_quality(logits), torch.tensor([0.0, 0.5], dtype=torch.float64))
    assert abs(bandit_env.entropy(logits)[0].item() - math.log(2)) < 1e-15


def test_advantages_come_from_verls_registry():
    import verl  # noqa: F401
    from verl.trainer.ppo import core_algos

    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    prompt_ids = torch.tensor([0, 0, 1, 1])
    ours = bandit_env.advantages_from(core_algos.get_adv_estimator_fn("reinforce_plus_plus_baseline"), rewards, prompt_ids)
    # C = [0.5, -0.5, 0, 0]; population mean 0, variance 0.125
    assert torch.allclose(ours, torch.tensor([0.5, -0.5, 0.0, 0.0], dtype=torch.float64) / math.sqrt(0.125), atol=1e-6)


def test_quick_run_writes_the_schema(tmp_path):
    result = subprocess.run(["verl-rfpp", "bandit", "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    methods = {"grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"}
    assert set(results["noise"]) == methods
    for by_lr in results["noise"].values():
        for lr, cell in by_lr.items():
            float(lr)
            assert set(cell) == {"quality", "flat_entropy"} and np.isfinite(list(cell.values())).all()
    assert set(results["binary"]) == methods | {"rloo"}
    for cell in results["binary"].values():
        assert set(cell) == {"best_lr", "pass_rate"} and isinstance(cell["best_lr"], str)
    kl = results["kl"]
    for key in ("k2_vs_reverse_cos", "k2_vs_reverse_norm_ratio", "k3_vs_forward_cos", "k3_vs_reverse_cos",
                "k3_vs_reverse_norm_ratio", "k1_grad_norm"):
        assert isinstance(kl[key], list) and len(kl[key]) == len(kl["distance"])
    assert all(abs(c - 1.0) < 1e-12 for c in kl["k2_vs_reverse_cos"])  # exact identity (contract 3.5)
    assert all(abs(n) < 1e-12 for n in kl["k1_grad_norm"])  # E[grad log pi] = 0
    assert kl["k2_sample_var"] > 0 and kl["k3_sample_var"] > 0
    assert set(results["bias"]) >= {"per_group", "global"}
    for name in ("noise_quality.png", "noise_flat_entropy.png", "kl_estimators.png", "report.md"):
        assert (tmp_path / name).stat().st_size > 0
