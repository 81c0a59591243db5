"""Run every experiment, write results.json, the PNG plots and report.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

from verl_rfpp.bandit import experiments as ex

LABELS = {ex.GRPO: "GRPO", ex.RLOO: "RLOO", ex.BASELINE: "REINFORCE++-baseline", ex.RFPP: "REINFORCE++"}


def run(out: Path, quick: bool = False) -> dict:
    """All four experiments at the chosen scale; returns what results.json holds."""
    from tqdm import tqdm

    scale = ex.QUICK if quick else ex.FULL
    out.mkdir(parents=True, exist_ok=True)
    lrs = len(scale.learning_rates)
    with tqdm(total=3 * lrs * scale.seeds, desc="noise amplification", unit="run") as bar:
        noise = ex.noise_amplification(scale, bar.update)
    with tqdm(total=4 * lrs * scale.seeds, desc="binary rewards", unit="run") as bar:
        binary = ex.binary_rewards(scale, bar.update)
    kl = ex.kl_estimators()
    with tqdm(total=2 * 3 * 4, desc="normalization bias", unit="cell") as bar:
        bias = ex.normalization_bias(scale, progress=bar.update)
    results = {
        "scale": "quick" if quick else "full",
        "noise": noise["methods"],
        "noise_best_quality": noise["best_quality"],
        "noise_initial_flat_entropy": noise["initial_flat_entropy"],
        "binary": {method: {"best_lr": r["best_lr"], "pass_rate": r["pass_rate"]} for method, r in binary.items()},
        "binary_by_lr": {method: r["by_lr"] for method, r in binary.items()},
        "kl": kl,
        "bias": bias,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2))
    _plots(out, noise, kl)
    (out / "report.md").write_text(_report(results))
    return results


def _plots(out: Path, noise: dict, kl: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = noise["curves"]
    lrs = list(next(iter(curves.values())))
    for key, name, ylabel in (("quality", "noise_quality.png", "expected quality, informative prompts"),
                              ("flat_entropy", "noise_flat_entropy.png", "entropy on flat prompts (nats)")):
        figure, axes = plt.subplots(1, len(lrs), figsize=(4 * len(lrs), 3.4), sharey=True, squeeze=False)
        for axis, lr in zip(axes[0], lrs):
            for method, by_lr in curves.items():
                axis.plot(by_lr[lr][key], label=LABELS[method])
            if key == "quality":
                axis.axhline(noise["best_quality"], color="grey", linestyle=":", label="best achievable")
            else:
                axis.axhline(math.log(10), color="grey", linestyle=":", label="ln 10 (start)")
            axis.set_title(f"lr = {lr}")
            axis.set_xlabel("step")
        axes[0][0].set_ylabel(ylabel)
        axes[0][-1].legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(out / name, dpi=110)
        plt.close(figure)
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    d = kl["distance"]
    left.plot(d, kl["k2_vs_reverse_cos"], "o-", label="k2 loss vs reverse KL")
    left.plot(d, kl["k3_vs_reverse_cos"], "s-", label="k3 loss vs reverse KL")
    left.plot(d, kl["k3_vs_forward_cos"], "^-", label="k3 loss vs forward KL")
    left.set_xlabel("distance from reference (logit scale)")
    left.set_ylabel("cosine of expected gradients")
    left.legend(fontsize=7)
    right.plot(d, kl["k2_vs_reverse_norm_ratio"], "o-", label="|k2| / |reverse|")
    right.plot(d, kl["k3_vs_reverse_norm_ratio"], "s-", label="|k3| / |reverse|")
    right.plot(d, kl["k1_grad_norm"], "x-", label="|E grad k1|")
    right.set_xlabel("distance from reference (logit scale)")
    right.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(out / "kl_estimators.png", dpi=110)
    plt.close(figure)


def _report(results: dict) -> str:
    lines = [f"# verl-rfpp bandit ({results['scale']} run)", "", "## 1. Noise amplification", "",
             f"256 prompts x 10 answers, half flat; reward noise N(0, 0.1^2). Best achievable quality "
             f"on informative prompts: {results['noise_best_quality']:.3f}. Flat-prompt entropy starts "
             f"at ln 10 = {results['noise_initial_flat_entropy']:.3f}.", "",
             "| method | lr | quality (informative) | entropy (flat) |", "| --- | --- | --- | --- |"]
    for method, by_lr in results["noise"].items():
        for lr, cell in by_lr.items():
            lines.append(f"| {LABELS[method]} | {lr} | {cell['quality']:.3f} | {cell['flat_entropy']:.3f} |")
    lines += ["", "## 2. Binary rewards (one correct answer of 10, no noise)", "",
              "| method | best lr | final pass rate |", "| --- | --- | --- |"]
    for method, cell in results["binary"].items():
        lines.append(f"| {LABELS[method]} | {cell['best_lr']} | {cell['pass_rate']:.3f} |")
    kl = results["kl"]
    lines += ["", "## 3. KL estimators as losses (5-token categorical, exact enumeration)", "",
              "| distance | cos(k2, reverse) | norm k2/reverse | cos(k3, forward) | cos(k3, reverse) | norm k3/reverse | norm E grad k1 |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for i, d in enumerate(kl["distance"]):
        lines.append(f"| {d} | {kl['k2_vs_reverse_cos'][i]:.6f} | {kl['k2_vs_reverse_norm_ratio'][i]:.6f} | "
                     f"{kl['k3_vs_forward_cos'][i]:.6f} | {kl['k3_vs_reverse_cos'][i]:.4f} | "
                     f"{kl['k3_vs_reverse_norm_ratio'][i]:.4f} | {kl['k1_grad_norm'][i]:.2e} |")
    lines += ["", f"Single-sample variance of the loss gradient at distance {kl['far_distance']}: "
              f"k2 {kl['k2_sample_var']:.4f}, k3 {kl['k3_sample_var']:.4f}.", "",
              "## 4. Bias of per-group standardization vs global normalization", "",
              f"Bernoulli(p = {results['bias']['p']}) rewards; E[advantage | own reward] by batch size.", "",
              "| normalization | group size | batch | E[A given 0] | E[A given 1] |", "| --- | --- | --- | --- | --- |"]
    for name in ("per_group", "global"):
        for k, rows in results["bias"][name].items():
            for batch, cell in rows.items():
                lines.append(f"| {name} | {k} | {batch} | {cell['given_0']:+.3f} | {cell['given_1']:+.3f} |")
    lines += ["", "Numbers are as measured; conclusions are in docs/bandit.md of the verl-rfpp repository.", ""]
    return "\n".join(lines)
