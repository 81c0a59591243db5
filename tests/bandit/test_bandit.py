"""The bandit's environment, sampler, update, learning-rate search and KL moments on known answers;
the --quick run's schema (docs/bandit/results-schema.md)."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from verl_rfpp.bandit import env as bandit_env
from verl_rfpp.bandit import experiments as ex


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
    baseline = core_algos.get_adv_estimator_fn("reinforce_plus_plus_baseline")
    ours = bandit_env.advantages_from(baseline, rewards, prompt_ids)
    # C = [0.5, -0.5, 0, 0]; population mean 0, variance 0.125
    assert torch.allclose(ours, torch.tensor([0.5, -0.5, 0.0, 0.0], dtype=torch.float64) / math.sqrt(0.125), atol=1e-6)


def test_population_std_grpo_by_hand():
    # group [1, 0, 0, 0]: mean 1/4, population variance 3/16; group [2, 2]: spread 0; a singleton keeps its score
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 5.0], dtype=torch.float64)
    prompt_ids = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    advantages = bandit_env.advantages_from(ex.advantage_function(ex.GRPO_POP), rewards, prompt_ids)
    s = math.sqrt(3 / 16)
    expected = [0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s, 0.0, 0.0, 5.0]
    assert torch.allclose(advantages, torch.tensor(expected, dtype=torch.float64), atol=1e-5)
    # population std of the group's advantages is 1; verl's grpo (unbiased std) gives sqrt(3/4)
    assert math.isclose(float(advantages[:4].std(correction=0)), 1.0, rel_tol=1e-5)
    verl = bandit_env.advantages_from(ex.advantage_function(ex.GRPO), rewards[:4], prompt_ids[:4])
    assert math.isclose(float(verl.std(correction=0)), math.sqrt(3 / 4), rel_tol=1e-5)


def test_binary_ceiling_closed_form_at_the_experiments_settings():
    ceiling = ex.binary_ceiling(prompts=256, answers=10, prompts_per_step=32, samples=8, steps=60)
    w = 0.9 ** 8  # 0.43047
    u = (1 - (1 - w) / 8) ** 60
    assert math.isclose(ceiling["all_wrong_probability"], 0.43046721, rel_tol=1e-8)
    assert math.isclose(ceiling["unlearned_fraction"], u, rel_tol=1e-12) and 0.0118 < u < 0.0120
    assert math.isclose(ceiling["pass_rate_ceiling"], 1 - 0.9 * u, rel_tol=1e-12)  # 0.98929
    assert math.isclose(ceiling["seed_std"], 0.9 * math.sqrt(u * (1 - u) / 256), rel_tol=1e-12)


def test_binary_ceiling_matches_a_monte_carlo_of_the_draws():
    # simulate the draw process itself (32 distinct prompts of 256 per step, 8 uniform answers each,
    # one correct of 10): the fraction of prompts never drawn with a correct answer in a group
    rng = np.random.default_rng(0)
    reps, steps = 400, 20
    never = np.ones((reps, 256), dtype=bool)
    for _ in range(steps):
        drawn = np.argsort(rng.random((reps, 256)), axis=1)[:, :32]
        hit = (rng.random((reps, 32, 8)) < 0.1).any(axis=2)
        rows = np.repeat(np.arange(reps)[:, None], 32, axis=1)
        never[rows[hit], drawn[hit]] = False
    expected = ex.binary_ceiling(steps=steps)["unlearned_fraction"]  # (1 - 0.0712)^20 = 0.228
    assert abs(never.mean() - expected) < 4 * math.sqrt(expected * (1 - expected) / never.size)


def test_group_methods_leave_exactly_the_never_hit_prompts_uniform():
    # in the bandit itself: a prompt whose groups never held the correct answer keeps zero logits (advantage 0
    # under grpo), so the final pass rate is 1 - 0.9 * (uniform prompts) / 256 up to the learned prompts' shortfall
    env = ex.binary_environment(0)
    final = {}

    def track(logits):
        final["logits"] = logits
        return None

    ex.train(env, ex.GRPO, 1e5, 15, 0, track)
    logits = final["logits"]
    uniform = (logits == 0).all(dim=-1)
    passes = env.expected_quality(logits)
    assert torch.all(passes[uniform] == 0.1) and float(passes[~uniform].min()) > 0.999
    u = ex.binary_ceiling(steps=15)["unlearned_fraction"]
    assert abs(float(uniform.double().mean()) - u) < 4 * math.sqrt(u * (1 - u) / 256)


# --- KL estimators: closed forms written from their definitions, float64 -------------------------


def _pieces(logits, ref_log):
    pi = torch.softmax(logits, dim=0)
    log_ratio = torch.log_softmax(logits, dim=0) - ref_log  # l = log pi - log pi_ref
    # |e_x - pi|^2 for every x: 1 - 2 pi_x + |pi|^2
    spread = 1 - 2 * pi + pi.square().sum()
    return pi, log_ratio, spread


def _reference_moments(pi, weight, spread):
    """E g and E|g - E g|^2 for g(x) = weight_x (e_x - pi), x ~ pi."""
    expected = pi * weight - pi * (pi * weight).sum()
    variance = (pi * weight.square() * spread).sum() - expected.square().sum()
    return expected, variance


CASES = [
    (torch.tensor([0.3, -1.2, 0.5, 2.0, -0.1], dtype=torch.float64), torch.tensor([1.0, 0.2, -0.7, 0.0, 0.4])),
    ex.collapsed_token_policy(1e-3),
    ex.collapsed_token_policy(0.3),
]


def test_k2_expected_gradient_is_the_reverse_kl_gradient_and_its_variance():
    for logits, ref_log in CASES:
        ref_log = torch.log_softmax(ref_log.to(torch.float64), dim=0)
        moments = ex.kl_gradient_moments(logits, ref_log)
        pi, log_ratio, spread = _pieces(logits, ref_log)
        reverse = pi * (log_ratio - (pi * log_ratio).sum())  # grad_theta KL(pi || pi_ref)
        expected, variance = _reference_moments(pi, log_ratio, spread)  # k2' = l
        assert torch.allclose(moments["reverse"], reverse, rtol=0, atol=1e-14)
        assert torch.allclose(expected, reverse, rtol=0, atol=1e-14)
        assert torch.allclose(moments["expected"]["k2"], reverse, rtol=0, atol=1e-14)
        assert math.isclose(moments["variance"]["k2"], float(variance), rel_tol=1e-10)


def test_unclamped_k3_expected_gradient_is_the_forward_kl_gradient_and_its_variance():
    # k3 = r - 1 - log r, r = exp(-l): dk3/dl = 1 - r, so E g = sum_x pi_x (1 - r_x)(e_x - pi) = pi - pi_ref
    for logits, ref_log in CASES:
        ref_log = torch.log_softmax(ref_log.to(torch.float64), dim=0)
        moments = ex.kl_gradient_moments(logits, ref_log)
        pi, log_ratio, spread = _pieces(logits, ref_log)
        forward = pi - ref_log.exp()
        expected, variance = _reference_moments(pi, 1 - torch.exp(-log_ratio), spread)
        assert torch.allclose(moments["forward"], forward, rtol=0, atol=1e-14)
        assert torch.allclose(expected, forward, rtol=0, atol=1e-14)
        assert torch.allclose(moments["expected"]["k3"], forward, rtol=0, atol=1e-12)
        assert math.isclose(moments["variance"]["k3"], float(variance), rel_tol=1e-10)
        assert float(moments["expected"]["k1"].norm()) < 1e-14  # E grad log pi = 0


def test_unclamped_k3_variance_explodes_as_the_reference_favoured_token_collapses():
    # the x* term of the variance: pi* (1 - q / pi*)^2 |e* - pi|^2 ~ q^2 / pi* as pi* -> 0
    variances = [ex.kl_gradient_moments(*ex.collapsed_token_policy(p))["variance"]["k3"] for p in (1e-3, 1e-4)]
    assert 9 < variances[1] / variances[0] < 11


def test_verls_clamp_drops_the_collapsed_tokens_gradient_by_hand():
    # pi = (0.01, 0.99), pi_ref = (0.5, 0.5): token 0 has r = 50, k3 = 49 - log 50 > 10, clamped to 10 by
    # verl: gradient 0. Token 1: r = 0.5 / 0.99, g_1 = (1 - r)(e_1 - pi) = a (-0.01, 0.01), a = 0.49 / 0.99.
    logits = torch.log(torch.tensor([0.01, 0.99], dtype=torch.float64))
    ref_log = torch.log(torch.tensor([0.5, 0.5], dtype=torch.float64))
    moments = ex.kl_gradient_moments(logits, ref_log)
    a = 0.49 / 0.99
    g1 = torch.tensor([-0.01 * a, 0.01 * a], dtype=torch.float64)
    assert torch.allclose(moments["expected"]["k3_verl"], 0.99 * g1, rtol=0, atol=1e-15)  # (-0.0049, 0.0049)
    assert torch.allclose(moments["expected"]["k3"], torch.tensor([-0.49, 0.49], dtype=torch.float64), atol=1e-14)
    # Var = 0.01 |0 - E g|^2 + 0.99 |g_1 - E g|^2 with E g = 0.99 g_1
    by_hand = (0.01 * 0.99**2 + 0.99 * 0.01**2) * float(g1.square().sum())
    assert math.isclose(moments["variance"]["k3_verl"], by_hand, rel_tol=1e-10)
    assert moments["clamped_tokens"] == 1


def test_verls_clamp_removes_exactly_the_collapsed_tokens_term():
    # only x* = token 0 is clamped (r = 500): E g = (pi - pi_ref) - (pi_0 - pi_ref_0)(e_0 - pi)
    logits, ref_log = ex.collapsed_token_policy(1e-3)
    moments = ex.kl_gradient_moments(logits, ref_log)
    pi, ref = torch.softmax(logits, dim=0), ref_log.exp()
    e0 = torch.zeros(5, dtype=torch.float64)
    e0[0] = 1.0
    expected = (pi - ref) - (pi[0] - ref[0]) * (e0 - pi)
    assert moments["clamped_tokens"] == 1
    assert torch.allclose(moments["expected"]["k3_verl"], expected, rtol=0, atol=1e-14)
    assert math.isclose(float(moments["expected"]["k3_verl"][0]), float(pi[0] * (pi[0] - ref[0])), rel_tol=1e-9)


def test_verl_clamp_ratios_are_where_verls_gradient_vanishes():
    from verl.trainer.ppo.core_algos import kl_penalty

    low, high = ex.verl_clamp_ratios()
    for r in (low, high):
        assert abs(r - 1 - math.log(r) - 10) < 1e-9
    for r, vanishes in ((high * 0.99, False), (high * 1.01, True), (low * 1.01, False), (low * 0.99, True)):
        log_prob = torch.tensor([0.0], dtype=torch.float64, requires_grad=True)
        (grad,) = torch.autograd.grad(kl_penalty(log_prob, torch.tensor([math.log(r)], dtype=torch.float64),
                                                 "low_var_kl").sum(), log_prob)
        assert (float(grad) == 0.0) == vanishes
        assert bool(ex.verl_clamped(log_prob.detach(), torch.tensor([math.log(r)], dtype=torch.float64))) == vanishes


def test_collapsed_token_policy():
    logits, ref_log = ex.collapsed_token_policy(1e-4)
    pi = torch.softmax(logits, dim=0)
    assert math.isclose(float(pi.sum()), 1.0, abs_tol=1e-15) and math.isclose(float(pi[0]), 1e-4, rel_tol=1e-12)
    assert torch.allclose(pi[1:] - ref_log.exp()[1:], torch.full((4,), (0.5 - 1e-4) / 4, dtype=torch.float64))


# --- learning-rate search on synthetic curves ------------------------------------------------------


def _recording(curve):
    calls = []

    def evaluate(lr):
        calls.append(lr)
        return [curve(lr) - 0.001, curve(lr) + 0.001]  # two "seeds", mean curve(lr), std sqrt(2) * 0.001

    return evaluate, calls


def test_tuning_extends_the_grid_up_to_an_interior_optimum():
    evaluate, calls = _recording(lambda lr: 1 - 0.1 * (math.log10(lr) - math.log10(300)) ** 2)
    tuned = ex.tune_learning_rate(evaluate, (3.0, 10.0, 30.0, 100.0), tolerance=0.002, max_rates=12)
    assert calls == [3.0, 10.0, 30.0, 100.0, 300.0, 1000.0]
    assert tuned["status"] == "interior" and tuned["best_lr"] == "300.0" and tuned["grid"] == calls
    assert math.isclose(tuned["pass_rate"], 1.0) and math.isclose(tuned["pass_rate_std"], math.sqrt(2) * 0.001)
    assert tuned["per_seed_by_lr"]["300.0"] == [0.999, 1.001]


def test_tuning_extends_down_when_the_optimum_is_below_the_grid():
    evaluate, calls = _recording(lambda lr: 1 - 0.1 * (math.log10(lr) - math.log10(0.3)) ** 2)
    tuned = ex.tune_learning_rate(evaluate, (3.0, 10.0), tolerance=0.002, max_rates=12)
    assert calls == [3.0, 10.0, 1.0, 0.3, 0.1] and tuned["status"] == "interior" and tuned["best_lr"] == "0.3"


def test_tuning_stops_on_a_plateau_and_at_the_cap():
    # flat from 1000 on, with a dip at 3000 smaller than the tolerance: a plateau, not an interior optimum
    evaluate, calls = _recording(lambda lr: min(lr, 1000.0) / 1000.0 - (0.0005 if lr == 3000.0 else 0.0))
    tuned = ex.tune_learning_rate(evaluate, (3.0, 10.0, 30.0, 100.0), tolerance=0.002, max_rates=12)
    assert calls == [3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0]
    assert tuned["status"] == "plateau" and tuned["best_lr"] == "1000.0" and tuned["near_best_from_lr"] == "1000.0"
    evaluate, calls = _recording(lambda lr: lr)
    tuned = ex.tune_learning_rate(evaluate, (3.0, 10.0), tolerance=0.002, max_rates=4)
    assert calls == [3.0, 10.0, 30.0, 100.0] and tuned["status"] == "edge" and tuned["best_lr"] == "100.0"


def test_tuning_refuses_an_empty_or_non_positive_grid():
    from verl_rfpp.errors import RfppError

    for initial in ((), (0.0, 10.0), (-1.0,)):
        with pytest.raises(RfppError, match="positive initial learning rate"):
            ex.tune_learning_rate(lambda lr: [1.0], initial)


@pytest.mark.slow
def test_quick_run_writes_the_schema(tmp_path):
    result = subprocess.run(["verl-rfpp", "bandit", "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    methods = {"grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline"}
    assert set(results["noise"]) == methods | {"grpo_population_std"}
    for by_lr in results["noise"].values():
        for lr, cell in by_lr.items():
            float(lr)
            assert set(cell) == {"quality", "flat_entropy"} and np.isfinite(list(cell.values())).all()
    assert set(results["binary"]) == methods | {"rloo", "reinforce_plus_plus_32x8"}
    for cell in results["binary"].values():
        assert cell["status"] in {"interior", "plateau", "edge"} and isinstance(cell["best_lr"], str)
        assert [str(lr) for lr in cell["grid"]] == list(cell["pass_rate_by_lr"]) == list(cell["std_by_lr"])
        assert cell["pass_rate"] == max(cell["pass_rate_by_lr"].values()) == cell["pass_rate_by_lr"][cell["best_lr"]]
        assert all(len(v) == results["binary_settings"]["seeds"] for v in cell["per_seed_by_lr"].values())
        assert set(cell["vs_top"]) == {"method", "paired_diff_mean", "paired_diff_std", "ties"}
    for regime, xkey in (("random_direction", "distance"), ("collapsed_token", "policy_prob")):
        data = results["kl"][regime]
        n = len(data[xkey])
        for name in ("k2", "k3", "k3_verl"):
            assert set(data[name]) == {"cos_reverse", "norm_ratio_reverse", "cos_forward", "norm_ratio_forward",
                                       "sample_var"}
            assert all(len(values) == n for values in data[name].values())
        assert all(abs(c - 1.0) < 1e-12 for c in data["k2"]["cos_reverse"])  # exact identity
        assert all(abs(c - 1.0) < 1e-12 for c in data["k3"]["cos_forward"])  # exact identity
        assert all(abs(v) < 1e-12 for v in data["k1_grad_norm"])  # E[grad log pi] = 0
    assert results["kl"]["collapsed_token"]["verl_clamped_tokens"][-1] == 1
    assert set(results["bias"]) >= {"per_group", "global"}
    for name in ("noise_quality.png", "noise_flat_entropy.png", "kl_estimators.png", "binary_lr.png", "report.md"):
        assert (tmp_path / name).stat().st_size > 0
    # every key the run writes is documented
    schema = (Path(__file__).resolve().parents[2] / "docs" / "bandit" / "results-schema.md").read_text()
    ceiling = results["binary_ceiling"]
    assert 0.1 < ceiling["pass_rate_ceiling"] < 1
    assert ceiling["pass_rate_ceiling"] >= results["binary"]["grpo"]["pass_rate"] - 0.05
    keys = set(results) | set(results["timing"]) | set(results["binary_settings"]) | set(results["kl"]["verl_clamp"])
    keys |= set(ceiling) | set(results["noise"])
    keys |= {k for cell in results["binary"].values() for k in cell} | {k for k in results["binary"]}
    keys |= {k for cell in results["binary"].values() for k in cell["vs_top"]}
    for regime in ("random_direction", "collapsed_token"):
        keys |= set(results["kl"][regime]) | set(results["kl"][regime]["k3"])
    undocumented = sorted(k for k in keys if f"`{k}`" not in schema)
    assert not undocumented, f"results-schema.md lacks {undocumented}"
