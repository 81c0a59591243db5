"""The four experiments of ``verl-rfpp bandit``; each returns plain data for results.json."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch

from verl_rfpp import catalog, losses
from verl_rfpp.bandit.env import TabularBandit, advantages_from, draw_batch, entropy, sgd_step
from verl_rfpp.errors import RfppError

GRPO, RLOO = "grpo", "rloo"
GRPO_POP = "grpo_population_std"  # GRPO standardized with the population std (ddof 0); not in verl
RFPP, BASELINE = catalog.REINFORCE_PLUS_PLUS.name, catalog.REINFORCE_PLUS_PLUS_BASELINE.name
OURS = tuple(record.name for record in catalog.in_report_order())  # every estimator record, group family first
# (prompts per step, samples per prompt): every method sees 256 samples per step; ours by family
GROUP_SHAPE = (32, 8)
BATCH_SHAPE = {GRPO: GROUP_SHAPE, GRPO_POP: GROUP_SHAPE, RLOO: GROUP_SHAPE,
               **{name: GROUP_SHAPE if catalog.estimator(name).family.groups else (256, 1) for name in OURS}}
NOISE_METHODS = (GRPO, GRPO_POP, *OURS)


@dataclass(frozen=True)
class Scale:
    """How big a run is: the full one or ``--quick``."""

    seeds: int
    noise_steps: int
    binary_steps: int
    learning_rates: tuple[float, ...]
    bias_trials: int
    binary_grid: tuple[float, ...]
    binary_max_rates: int


FULL = Scale(seeds=5, noise_steps=100, binary_steps=60, learning_rates=(3.0, 10.0, 30.0, 100.0), bias_trials=4000,
             binary_grid=(3.0, 10.0, 30.0, 100.0), binary_max_rates=12)
QUICK = Scale(seeds=2, noise_steps=20, binary_steps=15, learning_rates=(3.0, 30.0), bias_trials=300,
              binary_grid=(3.0, 30.0), binary_max_rates=4)

# learning rates the binary grid is extended with: 1 and 3 times every power of ten
LADDER = tuple(float(f"{m}e{e}") for e in range(-3, 9) for m in (1, 3))
# pass-rate differences smaller than this count as flat (0.5 of one prompt's 0.9 / 256 swing)
BINARY_TOLERANCE = 0.002
# three consecutive ladder rates (a factor 10) within the tolerance of the best: a plateau
PLATEAU_SPAN = 3
# (result key, advantage_function, (prompts per step, samples per prompt)); the last rows are controls:
# each estimator of ours that does not group (REINFORCE++) with the group methods' batch shape
BINARY_METHODS = (GRPO, RLOO, *OURS)
BINARY_RUNS = (
    *((method, method, BATCH_SHAPE[method]) for method in BINARY_METHODS),
    *((name + "_32x8", name, GROUP_SHAPE) for name in OURS if BATCH_SHAPE[name] != GROUP_SHAPE),
)


def grpo_population_std(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray,
                        epsilon: float = 1e-6, config: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO with the population std: ``(r_i - mean_g) / (sqrt(mean_g((r - mean_g)^2)) + epsilon)`` per
    group ``g`` of ``index`` (verl's ``grpo`` divides by the unbiased std instead: a factor
    ``sqrt((n - 1) / n)`` smaller for a group of ``n``); a group of one gets its raw score, as in verl."""
    scores = token_level_rewards.sum(dim=-1).to(torch.float64)
    advantages = torch.empty_like(scores)
    groups: dict = {}
    for row, uid in enumerate(index):
        groups.setdefault(uid, []).append(row)
    for rows in groups.values():
        members = scores[rows]
        if len(rows) == 1:
            advantages[rows] = members
        else:
            centred = members - members.mean()
            advantages[rows] = centred / (centred.square().mean().sqrt() + epsilon)
    advantages = advantages.to(token_level_rewards.dtype)[:, None] * response_mask
    return advantages, advantages


def advantage_function(name: str) -> Callable:
    """The advantage estimator verl's registry resolves ``name`` to (ours for REINFORCE++), or the
    population-std GRPO variant (``GRPO_POP``)."""
    if name == GRPO_POP:
        return grpo_population_std
    from verl.trainer.ppo import core_algos

    return core_algos.get_adv_estimator_fn(name)


def train(env: TabularBandit, method: str, lr: float, steps: int, seed: int,
          track: Callable[[torch.Tensor], Any], batch_shape: Optional[tuple[int, int]] = None) -> list:
    """On-policy training from zero logits; ``track(logits)`` after every step.

    ``batch_shape`` is (prompts per step, samples per prompt), ``BATCH_SHAPE[method]`` by default.
    """
    generator = torch.Generator().manual_seed(seed)
    logits = torch.zeros(env.quality.shape, dtype=torch.float64)
    fn = advantage_function(method)
    prompts_per_step, samples = batch_shape or BATCH_SHAPE[method]
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
    methods = NOISE_METHODS
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


def binary_ceiling(prompts: int = 256, answers: int = 10, prompts_per_step: int = 32, samples: int = 8,
                   steps: int = 60) -> dict:
    """Closed form: the expected final pass rate that all-wrong groups leave the group methods.

    The policy starts uniform (zero logits). GRPO, RLOO and REINFORCE++-baseline give every sample
    of a group without the correct answer advantage 0, so a prompt keeps its uniform logits until
    a group of it contains the correct answer. Each step draws ``prompts_per_step`` of ``prompts``
    distinct prompts (probability ``d = prompts_per_step / prompts`` for a given prompt, independent
    across steps) and ``samples`` answers of it, all wrong with probability ``w = (1 - 1/answers)^samples``.
    A prompt is never learned with probability ``u = (1 - d (1 - w))^steps``; it then passes with
    probability ``1/answers``, a learned prompt at most 1. Ceiling ``1 - (1 - 1/answers) u``; over
    the ``prompts`` prompts of one seed the unlearned count is Binomial(prompts, u), so the pass rate's
    std over seeds is ``(1 - 1/answers) sqrt(u (1 - u) / prompts)``."""
    drawn = prompts_per_step / prompts
    all_wrong = (1.0 - 1.0 / answers) ** samples
    unlearned = (1.0 - drawn * (1.0 - all_wrong)) ** steps
    miss = 1.0 - 1.0 / answers
    return {"draw_probability": drawn, "all_wrong_probability": all_wrong, "unlearned_fraction": unlearned,
            "pass_rate_ceiling": 1.0 - miss * unlearned,
            "seed_std": miss * math.sqrt(unlearned * (1.0 - unlearned) / prompts)}


def binary_environment(seed: int, prompts: int = 256, answers: int = 10) -> TabularBandit:
    """One correct answer per prompt: reward 1, else 0, no noise."""
    generator = torch.Generator().manual_seed(20_000 + seed)
    quality = torch.zeros(prompts, answers, dtype=torch.float64)
    quality[torch.arange(prompts), torch.randint(0, answers, (prompts,), generator=generator)] = 1.0
    return TabularBandit(quality, 0.0)


def _classify(means: Sequence[float], tolerance: float, span: int) -> tuple[str, Optional[str]]:
    """Where the optimum of a curve over increasing rates stands: (status, side to extend or None).

    A side of the best rate is resolved when a rate on it is worse than the best by more than
    ``tolerance`` (the curve falls off) or when the ``span`` outermost rates on that side are all
    within ``tolerance`` of the best (a plateau). Status: ``interior`` (falls off on both sides),
    ``plateau`` (resolved, a plateau on one side), ``edge`` (a side is unresolved).
    """
    best_index = int(np.argmax(means))
    best = means[best_index]
    falls = [any(m < best - tolerance for m in part) for part in (means[:best_index], means[best_index + 1:])]
    flat = [len(means) >= span and all(m >= best - tolerance for m in part)
            for part in (means[:span], means[-span:])]
    below, above = falls[0] or flat[0], falls[1] or flat[1]
    if not above:
        return "edge", "up"
    if not below:
        return "edge", "down"
    return ("interior" if all(falls) else "plateau"), None


def _next_rate(rates: Sequence[float], side: str) -> float:
    """The next ``LADDER`` rate above the largest (``up``) or below the smallest (``down``)."""
    if side == "up":
        candidates = [lr for lr in LADDER if lr > max(rates) * (1 + 1e-9)]
        if candidates:
            return candidates[0]
    else:
        candidates = [lr for lr in LADDER if lr < min(rates) * (1 - 1e-9)]
        if candidates:
            return candidates[-1]
    raise RfppError(f"the learning-rate ladder is exhausted going {side} from {sorted(rates)}: widen LADDER")


def tune_learning_rate(evaluate: Callable[[float], Sequence[float]], initial: Sequence[float],
                       tolerance: float = BINARY_TOLERANCE, max_rates: int = 12, span: int = PLATEAU_SPAN) -> dict:
    """Extend the grid along ``LADDER`` until the best mean of ``evaluate(lr)`` (one value per seed)
    is interior or on a plateau (see ``_classify``), or the grid holds ``max_rates`` rates.

    Returns the grid, per-seed values, mean and sample std per rate (keys ``str(lr)``), the best
    rate (largest mean), the smallest rate within ``tolerance`` of it, and the status.
    """
    if not initial or any(not lr > 0 for lr in initial):
        raise RfppError(f"tune_learning_rate needs at least one positive initial learning rate, got {list(initial)}")
    per_seed = {float(lr): [float(v) for v in evaluate(float(lr))] for lr in initial}
    while True:
        rates = sorted(per_seed)
        means = [float(np.mean(per_seed[lr])) for lr in rates]
        status, side = _classify(means, tolerance, span)
        if side is None or len(rates) >= max_rates:
            break
        new = _next_rate(rates, side)
        per_seed[new] = [float(v) for v in evaluate(new)]
    best = rates[int(np.argmax(means))]
    best_mean = max(means)
    return {
        "grid": rates,
        "pass_rate_by_lr": {str(lr): m for lr, m in zip(rates, means, strict=True)},
        "std_by_lr": {str(lr): _std(per_seed[lr]) for lr in rates},
        "per_seed_by_lr": {str(lr): per_seed[lr] for lr in rates},
        "best_lr": str(best),
        "pass_rate": best_mean,
        "pass_rate_std": _std(per_seed[best]),
        "near_best_from_lr": str(next(lr for lr, m in zip(rates, means, strict=True) if m >= best_mean - tolerance)),
        "status": status,
    }


def _std(values: Sequence[float]) -> float:
    """Sample standard deviation over seeds (0 for a single seed)."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def binary_rewards(scale: Scale, progress: Optional[Callable] = None) -> dict:
    """Experiment 2: final expected pass rate per method, learning rate tuned by ``tune_learning_rate``.

    Each method's entry also compares it, seed by seed at both best rates, with the method of the
    highest tuned pass rate (``vs_top``); a mean paired difference under the tolerance is a tie.
    """
    results: dict = {}
    for key, method, shape in BINARY_RUNS:
        def evaluate(lr: float, method=method, shape=shape) -> list[float]:
            finals = []
            for seed in range(scale.seeds):
                env = binary_environment(seed)
                curve = train(env, method, lr, scale.binary_steps, seed,
                              lambda logits, env=env: env.expected_quality(logits).mean().item(), batch_shape=shape)
                finals.append(curve[-1])
                if progress:
                    progress()
            return finals

        tuned = tune_learning_rate(evaluate, scale.binary_grid, BINARY_TOLERANCE, scale.binary_max_rates)
        results[key] = {"estimator": method, "batch_shape": list(shape), **tuned}
    top = max(BINARY_METHODS, key=lambda m: results[m]["pass_rate"])
    top_finals = np.array(results[top]["per_seed_by_lr"][results[top]["best_lr"]])
    for key, cell in results.items():
        diff = np.array(cell["per_seed_by_lr"][cell["best_lr"]]) - top_finals
        cell["vs_top"] = {"method": top, "paired_diff_mean": float(diff.mean()), "paired_diff_std": _std(diff),
                          "ties": bool(abs(diff.mean()) < BINARY_TOLERANCE)}
    return results


KL_VARIANTS = ("k2", "k3", "k3_verl")
# the reference of the collapsed-token regime: token 0 (x*) is the one it favours
COLLAPSE_REFERENCE = (0.5, 0.2, 0.15, 0.1, 0.05)
COLLAPSE_POLICY_PROBS = (0.3, 0.1, 0.03, 0.01, 1e-3, 1e-4)
RANDOM_DIRECTION_DISTANCES = (0.1, 0.3, 1.0, 2.0, 4.0)
# verl's low_var_kl clamps log(pi_ref / pi) to [-20, 20] and the estimate to [-10, 10]
VERL_LOG_RATIO_CLAMP, VERL_VALUE_CLAMP = 20.0, 10.0


def k3_unclamped(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 without clamps, ``r - 1 - log r`` with ``r = pi_ref / pi_theta``.

    Used as a loss on x ~ pi its gradient is ``(1 - r(x)) grad log pi(x)``, whose expectation is
    ``sum_x (pi(x) - pi_ref(x)) grad log pi(x)``: the gradient of the forward KL(pi_ref || pi).
    """
    log_ratio = ref_log_prob - log_prob
    return torch.expm1(log_ratio) - log_ratio


def verl_clamped(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    """True where verl's ``low_var_kl`` clamps (value or log-ratio), i.e. where its gradient is 0."""
    log_ratio = ref_log_prob - log_prob
    return (log_ratio.abs() > VERL_LOG_RATIO_CLAMP) | (k3_unclamped(log_prob, ref_log_prob) > VERL_VALUE_CLAMP)


def verl_clamp_ratios() -> tuple[float, float]:
    """The importance weights ``r = pi_ref / pi`` where ``r - 1 - log r`` reaches verl's value clamp
    (10), by bisection: below the first or above the second verl's ``low_var_kl`` has gradient 0."""

    def solve(lo: float, hi: float) -> float:
        excess = lambda r: r - 1.0 - math.log(r) - VERL_VALUE_CLAMP  # noqa: E731
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if (excess(mid) > 0) == (excess(lo) > 0) else (lo, mid)
        return 0.5 * (lo + hi)

    return solve(1e-12, 1.0), solve(1.0, 1e3)


def kl_gradient_moments(logits: torch.Tensor, ref_log_prob: torch.Tensor) -> dict:
    """Exact moments, by enumerating the categorical (float64), of each KL estimator used as a loss.

    For a sample x ~ pi (pi held fixed) an estimator ``k(x)`` contributes ``g(x) = grad k(x)`` with
    respect to the logits. Returns the reverse-KL gradient ``grad KL(pi || pi_ref)``, the
    forward-KL gradient ``grad KL(pi_ref || pi)``, and per advantage_function (``k1``, ``k2`` as
    ``losses.k2_penalty`` (docs/contract.md section 3.5), ``k3`` unclamped, ``k3_verl`` as verl's
    ``core_algos.kl_penalty(..., "low_var_kl")``) the expected gradient ``sum_x pi(x) g(x)`` and
    the single-sample variance ``sum_x pi(x) |g(x) - E g|^2``.
    """
    from verl.trainer.ppo.core_algos import kl_penalty

    logits = logits.detach().to(torch.float64).requires_grad_(True)
    ref_log_prob = ref_log_prob.detach().to(torch.float64)
    log_pi = torch.log_softmax(logits, dim=0)
    pi = log_pi.exp()
    reverse = torch.autograd.grad((pi * (log_pi - ref_log_prob)).sum(), logits, retain_graph=True)[0]
    forward = torch.autograd.grad((ref_log_prob.exp() * (ref_log_prob - log_pi)).sum(), logits,
                                  retain_graph=True)[0]
    per_sample = {
        "k1": log_pi - ref_log_prob,
        "k2": losses.k2_penalty(log_pi, ref_log_prob),
        "k3": k3_unclamped(log_pi, ref_log_prob),
        "k3_verl": kl_penalty(log_pi, ref_log_prob, "low_var_kl"),
    }
    weights = pi.detach()
    expected, variance = {}, {}
    for name, values in per_sample.items():
        grads = torch.stack([torch.autograd.grad(values[x], logits, retain_graph=True)[0]
                             for x in range(logits.shape[0])])
        expected[name] = (weights[:, None] * grads).sum(dim=0)
        variance[name] = float((weights * (grads - expected[name]).square().sum(dim=1)).sum())
    return {"reverse": reverse, "forward": forward, "expected": expected, "variance": variance,
            "clamped_tokens": int(verl_clamped(log_pi.detach(), ref_log_prob).sum())}


def _cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    denominator = a.norm() * b.norm()
    return float((a @ b) / denominator) if denominator > 0 else float("nan")


def _kl_regime(points: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """Per point: the estimators' expected gradients against the reverse/forward ones, variances."""
    keys = ("cos_reverse", "norm_ratio_reverse", "cos_forward", "norm_ratio_forward", "sample_var")
    out: dict = {"reverse_norm": [], "forward_norm": [], "k1_grad_norm": [], "verl_clamped_tokens": [],
                 **{name: {key: [] for key in keys} for name in KL_VARIANTS}}
    for logits, ref_log_prob in points:
        moments = kl_gradient_moments(logits, ref_log_prob)
        reverse, forward = moments["reverse"], moments["forward"]
        out["reverse_norm"].append(float(reverse.norm()))
        out["forward_norm"].append(float(forward.norm()))
        out["k1_grad_norm"].append(float(moments["expected"]["k1"].norm()))
        out["verl_clamped_tokens"].append(moments["clamped_tokens"])
        for name in KL_VARIANTS:
            g = moments["expected"][name]
            row = out[name]
            row["cos_reverse"].append(_cosine(g, reverse))
            row["norm_ratio_reverse"].append(float(g.norm() / reverse.norm()))
            row["cos_forward"].append(_cosine(g, forward))
            row["norm_ratio_forward"].append(float(g.norm() / forward.norm()))
            row["sample_var"].append(moments["variance"][name])
    return out


def collapsed_token_policy(policy_prob: float, reference: Sequence[float] = COLLAPSE_REFERENCE):
    """(policy logits, reference log-probabilities): the policy has pushed token 0 (x*, the one the
    reference favours) down to ``policy_prob`` and spread the freed mass evenly over the others."""
    ref = torch.tensor(reference, dtype=torch.float64)
    pi = ref.clone()
    pi[0] = policy_prob
    pi[1:] += (ref[0] - policy_prob) / (len(reference) - 1)
    return pi.log(), ref.log()


def kl_estimators(distances: Sequence[float] = RANDOM_DIRECTION_DISTANCES, tokens: int = 5,
                  policy_probs: Sequence[float] = COLLAPSE_POLICY_PROBS) -> dict:
    """Experiment 3: k2, unclamped k3 and verl's clamped k3 as losses, exact moments, two regimes.

    ``random_direction``: a random reference over ``tokens`` tokens, the policy moved from it by
    ``distance`` along one random unit direction of the logits. ``collapsed_token``: see
    ``collapsed_token_policy``.
    """
    generator = torch.Generator().manual_seed(0)
    direction = torch.randn(tokens, generator=generator, dtype=torch.float64)
    direction /= direction.norm()
    ref_logits = torch.randn(tokens, generator=generator, dtype=torch.float64)
    ref_log = torch.log_softmax(ref_logits, dim=0)
    random_direction = {"tokens": tokens, "distance": list(distances),
                        **_kl_regime([(ref_logits + d * direction, ref_log) for d in distances])}
    collapsed = {"reference": list(COLLAPSE_REFERENCE), "policy_prob": list(policy_probs),
                 "importance_weight": [COLLAPSE_REFERENCE[0] / p for p in policy_probs],
                 **_kl_regime([collapsed_token_policy(p) for p in policy_probs])}
    return {"random_direction": random_direction, "collapsed_token": collapsed}


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
        fn = advantage_function(method)
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
