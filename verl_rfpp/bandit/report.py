"""Run every experiment, write results.json, the PNG plots and report.md."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from verl_rfpp import catalog
from verl_rfpp.bandit import experiments as ex

LABELS = {ex.GRPO: "GRPO", ex.GRPO_POP: "GRPO (population std)", ex.RLOO: "RLOO",
          **{name: catalog.estimator(name).label for name in ex.OURS}}


def run_experiments(out: Path, quick: bool = False) -> dict:
    """All four experiments at the chosen scale; returns what results.json holds."""
    import torch

    scale = ex.QUICK if quick else ex.FULL
    out.mkdir(parents=True, exist_ok=True)
    # the tensors are tiny: one thread avoids intra-op thread overhead (4x the CPU time on a loaded machine)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        results, noise_curves = _experiments(scale, quick)
    finally:
        torch.set_num_threads(threads)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    _plots(out, results, noise_curves)
    (out / "report.md").write_text(_report(results))
    return results


def _experiments(scale: ex.Scale, quick: bool) -> tuple[dict, dict]:
    """The four experiments; (what results.json holds, the noise experiment's mean curves)."""
    from tqdm import tqdm

    start_wall, start_cpu, start_load = time.perf_counter(), time.process_time(), os.getloadavg()[0]
    lrs = len(scale.learning_rates)
    with tqdm(total=len(ex.NOISE_METHODS) * lrs * scale.seeds, desc="noise amplification", unit="run") as bar:
        noise = ex.noise_amplification(scale, bar.update)
    with tqdm(desc="binary rewards", unit="run") as bar:
        binary = ex.binary_rewards(scale, bar.update)
    kl = ex.kl_estimators()
    with tqdm(total=2 * 3 * 4, desc="normalization bias", unit="cell") as bar:
        bias = ex.normalization_bias(scale, progress=bar.update)
    low, high = ex.verl_clamp_ratios()
    results = {
        "scale": "quick" if quick else "full",
        "noise": noise["methods"],
        "noise_best_quality": noise["best_quality"],
        "noise_initial_flat_entropy": noise["initial_flat_entropy"],
        "binary_settings": {"steps": scale.binary_steps, "seeds": scale.seeds, "initial_grid": list(scale.binary_grid),
                            "max_rates": scale.binary_max_rates, "tolerance": ex.BINARY_TOLERANCE,
                            "plateau_span": ex.PLATEAU_SPAN},
        "binary": binary,
        "binary_ceiling": ex.binary_ceiling(prompts=256, answers=10, prompts_per_step=ex.BATCH_SHAPE[ex.GRPO][0],
                                            samples=ex.BATCH_SHAPE[ex.GRPO][1], steps=scale.binary_steps),
        "kl": {**kl, "verl_clamp": {"log_ratio": ex.VERL_LOG_RATIO_CLAMP, "value": ex.VERL_VALUE_CLAMP,
                                    "zero_gradient_below_r": low, "zero_gradient_above_r": high}},
        "bias": bias,
    }
    results["timing"] = {"wall_s": time.perf_counter() - start_wall, "cpu_s": time.process_time() - start_cpu,
                         "load_average_1min": [start_load, os.getloadavg()[0]], "cpu_count": os.cpu_count(),
                         "torch_threads": 1}
    return results, noise["curves"]


def _plots(out: Path, results: dict, curves: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lrs = list(next(iter(curves.values())))
    for key, name, ylabel in (("quality", "noise_quality.png", "expected quality, informative prompts"),
                              ("flat_entropy", "noise_flat_entropy.png", "entropy on flat prompts (nats)")):
        figure, axes = plt.subplots(1, len(lrs), figsize=(4 * len(lrs), 3.4), sharey=True, squeeze=False)
        for axis, lr in zip(axes[0], lrs, strict=True):
            for method, by_lr in curves.items():
                axis.plot(by_lr[lr][key], label=LABELS[method])
            if key == "quality":
                axis.axhline(results["noise_best_quality"], color="grey", linestyle=":", label="best achievable")
            else:
                axis.axhline(math.log(10), color="grey", linestyle=":", label="ln 10 (start)")
            axis.set_title(f"lr = {lr}")
            axis.set_xlabel("step")
        axes[0][0].set_ylabel(ylabel)
        axes[0][-1].legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(out / name, dpi=110)
        plt.close(figure)
    _binary_plot(plt, out, results["binary"])
    _kl_plot(plt, out, results["kl"])


def _binary_plot(plt, out: Path, binary: dict) -> None:
    figure, (full, zoom) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, cell in binary.items():
        rates = cell["grid"]
        means = [cell["pass_rate_by_lr"][str(lr)] for lr in rates]
        stds = [cell["std_by_lr"][str(lr)] for lr in rates]
        for axis in (full, zoom):
            line = axis.errorbar(rates, means, yerr=stds, marker="o", markersize=3, capsize=2, label=_label(key, cell),
                                 linestyle="--" if key not in LABELS else "-")
            axis.plot([float(cell["best_lr"])], [cell["pass_rate"]], marker="*", markersize=11,
                      color=line[0].get_color())
    for axis in (full, zoom):
        axis.set_xscale("log")
        axis.set_xlabel("learning rate")
    full.set_ylabel("final expected pass rate (mean, std over seeds)")
    full.set_title("binary rewards: pass rate by learning rate (star: best)")
    bests = [cell["pass_rate"] for cell in binary.values()]
    zoom.set_ylim(min(bests) - 0.01, min(1.003, max(bests) + 0.005))
    zoom.set_title("zoom on the best pass rates")
    full.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    figure.savefig(out / "binary_lr.png", dpi=110)
    plt.close(figure)


def _label(key: str, cell: dict) -> str:
    prompts, samples = cell["batch_shape"]
    return f"{LABELS.get(key, LABELS[cell['estimator']])} ({prompts}x{samples})"


KL_STYLE = {"k2": ("o", "-", "tab:blue", "k2"), "k3": ("s", "-", "tab:orange", "k3 unclamped"),
            "k3_verl": ("^", "--", "tab:green", "k3 as verl clamps it")}


def _kl_plot(plt, out: Path, kl: dict) -> None:
    figure, axes = plt.subplots(2, 3, figsize=(13, 7.4))
    for row, (regime, xkey, xlabel) in enumerate((
            ("random_direction", "distance", "random direction: distance from reference (logit scale)"),
            ("collapsed_token", "policy_prob", "collapsed token: pi_theta(x*), with pi_ref(x*) = 0.5"))):
        data = kl[regime]
        x = data[xkey]
        cos_axis, norm_axis, var_axis = axes[row]
        for name, (marker, line, color, label) in KL_STYLE.items():
            cos_axis.plot(x, data[name]["cos_reverse"], marker=marker, linestyle=line, color=color,
                          label=f"{label} vs reverse")
            cos_axis.plot(x, data[name]["cos_forward"], marker=marker, linestyle=":", color=color, alpha=0.6,
                          markerfacecolor="none", label=f"{label} vs forward")
            norm_axis.plot(x, data[name]["norm_ratio_forward"], marker=marker, linestyle=line, color=color,
                           label=f"|{label}| / |forward|")
            var_axis.plot(x, data[name]["sample_var"], marker=marker, linestyle=line, color=color, label=label)
        norm_axis.plot(x, [r / f for r, f in zip(data["reverse_norm"], data["forward_norm"], strict=True)], "k:",
                       label="|reverse| / |forward|")
        cos_axis.set_title("cosine of E grad with the KL gradients (solid: reverse, dotted: forward)", fontsize=8)
        norm_axis.set_title("norm of E grad relative to the forward-KL gradient", fontsize=8)
        var_axis.set_title("single-sample gradient variance", fontsize=8)
        var_axis.set_yscale("log")
        for axis in (cos_axis, norm_axis, var_axis):
            axis.set_xlabel(xlabel, fontsize=8)
            axis.legend(fontsize=6)
            if regime == "collapsed_token":
                axis.set_xscale("log")
                axis.invert_xaxis()
    figure.tight_layout()
    figure.savefig(out / "kl_estimators.png", dpi=110)
    plt.close(figure)


def _report(results: dict) -> str:
    timing = results["timing"]
    lines = [f"# verl-rfpp bandit ({results['scale']} run_experiments)", "",
             f"Run time {timing['wall_s']:.0f} s wall, {timing['cpu_s']:.0f} s CPU (one torch thread) on a "
             f"{timing['cpu_count']}-core machine whose 1-minute load average was {timing['load_average_1min'][0]:.1f} "
             f"at the start and {timing['load_average_1min'][1]:.1f} at the end (other jobs). "
             "Schema of `results.json`: [results-schema.md](results-schema.md).", "", *_headline(results), "",
             "## 1. Noise amplification", "",
             f"256 prompts x 10 answers, half flat; reward noise N(0, 0.1^2). Best achievable quality "
             f"on informative prompts: {results['noise_best_quality']:.3f}. Flat-prompt entropy starts "
             f"at ln 10 = {results['noise_initial_flat_entropy']:.3f}.", "",
             "| method | lr | quality (informative) | entropy (flat) |", "| --- | --- | --- | --- |"]
    for method, by_lr in results["noise"].items():
        for lr, cell in by_lr.items():
            lines.append(f"| {LABELS[method]} | {lr} | {cell['quality']:.3f} | {cell['flat_entropy']:.3f} |")
    lines += ["", *_binary_section(results), "", *_kl_section(results["kl"]), "",
              "## 4. Bias of per-group standardization vs global normalization", "",
              f"Bernoulli(p = {results['bias']['p']}) rewards; E[advantage | own reward] by batch size.", "",
              "| normalization | group size | batch | E[A given 0] | E[A given 1] |", "| --- | --- | --- | --- | --- |"]
    for name in ("per_group", "global"):
        for k, rows in results["bias"][name].items():
            for batch, cell in rows.items():
                lines.append(f"| {name} | {k} | {batch} | {cell['given_0']:+.3f} | {cell['given_1']:+.3f} |")
    lines += ["", "Numbers are as measured; what they mean for the method: docs/bandit.md.", ""]
    return "\n".join(lines)


def _headline(results: dict) -> list[str]:
    """A few lines with the run's main numbers, each from results.json."""
    noise, lr = results["noise"], list(results["noise"][ex.GRPO])[-1]
    binary = {key: cell for key, cell in results["binary"].items() if key in LABELS}
    groups = _tie_groups(binary, results["binary_settings"]["tolerance"])
    top = binary[groups[0][0]]
    ct, rd = results["kl"]["collapsed_token"], results["kl"]["random_direction"]
    tiny = len(ct["policy_prob"]) - 1
    return [
        "Headline:", "",
        f"- Noise amplification, lr {lr}: flat-prompt entropy (start {results['noise_initial_flat_entropy']:.3f}) "
        + ", ".join(f"{LABELS[m]} {noise[m][lr]['flat_entropy']:.3f}" for m in noise)
        + "; quality on informative prompts (best achievable " + f"{results['noise_best_quality']:.3f}) "
        + ", ".join(f"{LABELS[m]} {noise[m][lr]['quality']:.3f}" for m in noise) + ".",
        "- Binary rewards, learning rate tuned per method (optimum status: "
        + ", ".join(sorted({c["status"] for c in binary.values()})) + "): "
        + "; ".join(", ".join(LABELS[k] for k in group) + (" tie at " if len(group) > 1 else " at ")
                    + f"{binary[group[0]]['pass_rate']:.4f} +- {binary[group[0]]['pass_rate_std']:.4f}"
                    + (f" (mean per-seed difference to the top {_paired_gap(binary[group[0]], top):+.4f})"
                       if group != groups[0] else "")
                    for group in groups)
        + "".join(f"; control {_label(k, c)} at {c['pass_rate']:.4f} +- {c['pass_rate_std']:.4f}"
                  for k, c in results["binary"].items() if k not in LABELS) + ".",
        "- KL losses: k2's expected gradient is the reverse-KL gradient and unclamped k3's the forward-KL gradient, "
        "both exactly. k3's variance is below k2's only near the reference (up to distance "
        f"{_lower_until(rd, 'distance')}); "
        f"with a reference-favoured token pushed to pi_theta(x*) = {ct['policy_prob'][tiny]:g} "
        f"(pi_ref(x*) = {ct['reference'][0]}) it is {ct['k3']['sample_var'][tiny]:.4g} against k2's "
        f"{ct['k2']['sample_var'][tiny]:.3g}. verl's clamped low_var_kl bounds it "
        f"({ct['k3_verl']['sample_var'][tiny]:.3g}) by dropping that token's gradient, and with it the pull back "
        f"toward the reference (cosine {ct['k3_verl']['cos_forward'][tiny]:.3f} with the forward-KL gradient).",
    ]


def _binary_section(results: dict) -> list[str]:
    settings, binary = results["binary_settings"], results["binary"]
    tol = settings["tolerance"]
    lines = ["## 2. Binary rewards (one correct answer of 10, no noise)", "",
             f"256 prompts x 10 answers, reward 1 for the one correct answer, else 0; {settings['steps']} steps, "
             f"{settings['seeds']} seeds, 256 samples per step. The learning-rate grid starts at "
             f"{settings['initial_grid']} and is extended per method along 1, 3, 10, 30, ... until the best rate "
             f"(largest mean pass rate) is *interior* (a larger and a smaller rate are worse by more than {tol}) "
             f"or on a *plateau* ({settings['plateau_span']} consecutive rates, a factor 10, within {tol} of the "
             f"best), at most {settings['max_rates']} rates (*edge*: neither was reached). Spread: sample std over "
             f"seeds. The last row is a control: REINFORCE++ with the group methods' batch shape.", "",
             "| method (prompts x samples) | best lr | pass rate at best lr | status | within "
             f"{tol} of best from lr | paired difference to the top, per seed | tie with the top |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, cell in binary.items():
        vs = cell["vs_top"]
        lines.append(f"| {_label(key, cell)} | {cell['best_lr']} | "
                     f"{cell['pass_rate']:.4f} +- {cell['pass_rate_std']:.4f}"
                     f" | {cell['status']} | {cell['near_best_from_lr']} | "
                     f"{vs['paired_diff_mean']:+.4f} +- {vs['paired_diff_std']:.4f} | "
                     f"{'yes' if vs['ties'] else 'no'} |")
    rates = sorted({lr for cell in binary.values() for lr in cell["grid"]})
    lines += ["", "Pass rate by learning rate (mean +- std over seeds; blank: not run_experiments):", "",
              "| lr | " + " | ".join(_label(key, cell) for key, cell in binary.items()) + " |",
              "| --- |" + " --- |" * len(binary)]
    for lr in rates:
        cells = [f"{cell['pass_rate_by_lr'][str(lr)]:.4f} +- {cell['std_by_lr'][str(lr)]:.4f}"
                 if str(lr) in cell["pass_rate_by_lr"] else "" for cell in binary.values()]
        lines.append(f"| {lr:g} | " + " | ".join(cells) + " |")
    main = {key: cell for key, cell in binary.items() if key in LABELS}
    top = next(iter(main.values()))["vs_top"]["method"]
    groups = _tie_groups(main, tol)
    statuses = sorted({cell["status"] for cell in binary.values()})
    lines += ["", f"Verdict (two methods tie when their per-seed pass rates, each at its own best rate, differ by "
              f"less than {tol} on average): tuned, the top method is {LABELS[top]} ({main[top]['pass_rate']:.4f}). "
              + " ".join(_group_sentence(group, main) for group in groups)
              + f" Optimum status: {', '.join(statuses)}.", "",
              "![binary pass rate by learning rate](binary_lr.png)", "",
              "How to read it: the rewards are noise-free and the policy is tabular, so a larger step along "
              "a sampled advantage is never a step the wrong way; the learning rate only sets how fast a prompt is "
              "solved after its first correct sample, and a curve can only rise to a plateau, not turn down. "
              "What a large rate cannot fix is a prompt whose sampled group never contained the correct answer: "
              "GRPO, RLOO and REINFORCE++-baseline give every sample of an "
              "all-wrong group advantage 0, while REINFORCE++ (no group baseline, global normalization) gives "
              "failures a negative advantage whenever another sample of the batch succeeded, so it also pushes "
              "down the wrong answers it drew.", "", *_ceiling_lines(results)]
    return lines


def _ceiling_lines(results: dict) -> list[str]:
    """The closed-form ceiling of the group methods (``ex.binary_ceiling``) next to their measured tie."""
    ceiling, binary = results["binary_ceiling"], results["binary"]
    settings = results["binary_settings"]
    groups = [key for key in ex.BINARY_METHODS if ex.BATCH_SHAPE[key] == ex.GROUP_SHAPE and key in binary]
    prompts, samples = ex.BATCH_SHAPE[ex.GRPO]
    measured = ", ".join(f"{LABELS[key]} {binary[key]['pass_rate']:.4f} +- {binary[key]['pass_rate_std']:.4f}"
                         for key in groups)
    return [f"Where the tie sits, in closed form (`binary_ceiling`): a prompt is drawn in a step with probability "
            f"d = {prompts}/256 = {ceiling['draw_probability']:.3f}, its group of {samples} misses the correct "
            f"answer with probability w = 0.9^{samples} = {ceiling['all_wrong_probability']:.4f} while its logits "
            f"are still uniform, and an all-wrong group has advantage 0 under the group methods, so the prompt stays "
            f"uniform. After {settings['steps']} steps a prompt was never learned with probability "
            f"u = (1 - d (1 - w))^{settings['steps']} = {ceiling['unlearned_fraction']:.4f}; it then passes with "
            f"probability 0.1, a learned one at most 1. Ceiling 1 - 0.9 u = {ceiling['pass_rate_ceiling']:.4f} "
            f"(seed-to-seed std 0.9 sqrt(u (1 - u) / 256) = {ceiling['seed_std']:.4f}); measured at the best rates: "
            f"{measured}."]


def _paired_gap(a: dict, b: dict) -> float:
    """Mean over seeds of a's pass rate at its best rate minus b's at its own."""
    first, second = a["per_seed_by_lr"][a["best_lr"]], b["per_seed_by_lr"][b["best_lr"]]
    return sum(x - y for x, y in zip(first, second, strict=True)) / len(first)


def _tie_groups(main: dict, tol: float) -> list[list[str]]:
    """Methods in descending pass rate, grouped: each joins the first group all of whose members it ties."""
    groups: list[list[str]] = []
    for key in sorted(main, key=lambda k: -main[k]["pass_rate"]):
        for group in groups:
            if all(abs(_paired_gap(main[key], main[other])) < tol for other in group):
                group.append(key)
                break
        else:
            groups.append([key])
    return groups


def _group_sentence(group: list[str], main: dict) -> str:
    names = ", ".join(LABELS[key] for key in group)
    rates = ", ".join(f"{main[key]['pass_rate']:.4f} +- {main[key]['pass_rate_std']:.4f}" for key in group)
    first = main[group[0]]
    gap = (f"; {first['vs_top']['paired_diff_mean']:+.4f} +- {first['vs_top']['paired_diff_std']:.4f} per seed against "
           f"the top" if first["vs_top"]["method"] not in group else "")
    return (f"{names} tie ({rates}{gap})." if len(group) > 1 else f"{names} stands alone ({rates}{gap}).")


KL_NAMES = {"k2": "k2", "k3": "k3 unclamped", "k3_verl": "k3 verl (low_var_kl)"}


def _kl_table(data: dict, xkey: str, xname: str) -> list[str]:
    lines = [f"| {xname} | estimator | cos vs reverse | norm / reverse | cos vs forward | norm / forward | "
             "single-sample variance | tokens verl clamps |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for i, x in enumerate(data[xkey]):
        for name in ("k2", "k3", "k3_verl"):
            row = data[name]
            clamped = str(data["verl_clamped_tokens"][i]) if name == "k3_verl" else ""
            lines.append(f"| {x:g} | {KL_NAMES[name]} | "
                         f"{row['cos_reverse'][i]:.4f} | {row['norm_ratio_reverse'][i]:.4f} | "
                         f"{row['cos_forward'][i]:.4f} | {row['norm_ratio_forward'][i]:.4f} | "
                         f"{row['sample_var'][i]:.4g} | {clamped} |")
    return lines


def _lower_until(data: dict, xkey: str) -> str:
    """The last point, from the first on, up to which unclamped k3's variance stays below k2's."""
    last = None
    for x, k3, k2 in zip(data[xkey], data["k3"]["sample_var"], data["k2"]["sample_var"], strict=True):
        if k3 >= k2:
            break
        last = x
    return "none" if last is None else f"{last:g}"


def _kl_section(kl: dict) -> list[str]:
    rd, ct, clamp = kl["random_direction"], kl["collapsed_token"], kl["verl_clamp"]
    far, tiny = len(rd["distance"]) - 1, len(ct["policy_prob"]) - 1
    clamped_from = next((p for p, n in zip(ct["policy_prob"], ct["verl_clamped_tokens"], strict=True) if n), None)
    near = 0
    lines = ["## 3. KL estimators as losses (exact enumeration over a 5-token categorical, float64)", "",
             "For x ~ pi_theta (held fixed) each estimator k(x) used as a loss contributes g(x) = grad k(x) "
             "with respect to the logits. Expected gradient: sum_x pi(x) g(x); single-sample variance: "
             "sum_x pi(x) |g(x) - E g|^2; both exact. Reverse: grad KL(pi_theta || pi_ref); forward: "
             "grad KL(pi_ref || pi_theta). Estimators: k2 = (log r)^2 / 2 (ours, `losses.k2_penalty`); "
             "k3 unclamped = r - 1 - log r with r = pi_ref / pi_theta; k3 verl = verl's "
             "`core_algos.kl_penalty(..., \"low_var_kl\")`, which clamps log r to "
             f"[-{clamp['log_ratio']:g}, {clamp['log_ratio']:g}] and the value to [-{clamp['value']:g}, "
             f"{clamp['value']:g}]; its gradient is 0 wherever r < {clamp['zero_gradient_below_r']:.3g} or "
             f"r > {clamp['zero_gradient_above_r']:.4g}.", "",
             "### 3.1 Random direction (policy = reference + distance x a random unit direction of the logits)", "",
             *_kl_table(rd, "distance", "distance"), "",
             "### 3.2 Collapsed token (the k3 criticism's regime)", "",
             f"Reference {ct['reference']}; the policy has pushed x* (token 0, pi_ref(x*) = {ct['reference'][0]}) "
             "down to pi_theta(x*) and spread the freed mass evenly over the other four tokens; "
             "x*'s importance weight r = pi_ref(x*) / pi_theta(x*) is "
             + ", ".join(f"{w:g}" for w in ct["importance_weight"]) + ".", "",
             *_kl_table(ct, "policy_prob", "pi_theta(x*)"), "",
             "![KL estimators](kl_estimators.png)", "",
             "### 3.3 Which statement holds where", "",
             "- k2's expected gradient is the reverse-KL gradient, exactly, in every regime (cosine 1, norm "
             f"ratio 1; smallest cosine seen {min(rd['k2']['cos_reverse'] + ct['k2']['cos_reverse']):.12f}).",
             "- Unclamped k3's expected gradient is the forward-KL gradient, exactly, in every regime "
             "(sum_x pi (1 - r) grad log pi = grad KL(pi_ref || pi)). It is close to the reverse-KL gradient only "
             f"near the reference (cosine {rd['k3']['cos_reverse'][near]:.4f} at distance {rd['distance'][near]:g}); "
             f"away from it the bias against reverse KL is large (cosine {rd['k3']['cos_reverse'][far]:.3f} at "
             f"distance {rd['distance'][far]:g}; {ct['k3']['cos_reverse'][tiny]:.3f} with "
             f"{ct['k3']['norm_ratio_reverse'][tiny]:.2f}x the norm at pi_theta(x*) = {ct['policy_prob'][tiny]:g}, "
             "where forward KL pulls x* back and reverse KL barely does).",
             f"- \"k3 has lower variance than k2\" holds near the reference only: unclamped k3's variance is the "
             f"smaller up to distance {_lower_until(rd, 'distance')} and down to pi_theta(x*) = "
             f"{_lower_until(ct, 'policy_prob')} here ({rd['k3']['sample_var'][near]:.3g} vs "
             f"{rd['k2']['sample_var'][near]:.3g} at distance {rd['distance'][near]:g}); further away it is the larger "
             f"({rd['k3']['sample_var'][far]:.3g} vs {rd['k2']['sample_var'][far]:.3g} at distance "
             f"{rd['distance'][far]:g}), "
             "and in the collapsed-token regime it explodes like pi_ref(x*)^2 / pi_theta(x*) "
             f"({', '.join(f'{v:.3g}' for v in ct['k3']['sample_var'])} against k2's "
             f"{', '.join(f'{v:.3g}' for v in ct['k2']['sample_var'])}).",
             "- verl's clamp changes variance and bias. A sampled token whose r leaves "
             f"[{clamp['zero_gradient_below_r']:.3g}, {clamp['zero_gradient_above_r']:.4g}] gets gradient 0, so the "
             f"variance stays bounded ({ct['k3_verl']['sample_var'][tiny]:.3g} at pi_theta(x*) = "
             f"{ct['policy_prob'][tiny]:g}, "
             f"{rd['k3_verl']['sample_var'][far]:.3g} at distance {rd['distance'][far]:g}: the earlier reading "
             "\"far from the "
             "reference k3's variance is lower than k2's\" was the clamp's doing). The price is bias: the dropped term "
             "is the one that pulls x* back, E grad = (pi - pi_ref) - (pi(x*) - pi_ref(x*)) (e_x* - pi) when only x* "
             "is clamped, whose x* component is pi(x*) (pi(x*) - pi_ref(x*)) instead of forward KL's "
             "pi(x*) - pi_ref(x*): the restoring pull shrinks by the factor pi(x*), the more the further x* collapsed."
             + (f" Here x* is clamped from pi_theta(x*) = {clamped_from:g} on; at {ct['policy_prob'][tiny]:g} the "
                f"clamped expected gradient has cosine {ct['k3_verl']['cos_forward'][tiny]:.3f} with the forward-KL "
                f"gradient at {ct['k3_verl']['norm_ratio_forward'][tiny]:.3f} of its norm, and cosine "
                f"{ct['k3_verl']['cos_reverse'][tiny]:.3f} with the reverse-KL one at "
                f"{ct['k3_verl']['norm_ratio_reverse'][tiny]:.2f} of its norm (what is left is the pull on the other "
                "tokens, which in this setup points like reverse KL's); at distance "
                f"{rd['distance'][far]:g} of the random direction it matches neither (cosine "
                f"{rd['k3_verl']['cos_forward'][far]:.3f} forward, {rd['k3_verl']['cos_reverse'][far]:.3f} reverse)."
                if clamped_from is not None else "")
             + " Where nothing is clamped verl's k3 equals the unclamped one.",
             ]
    return lines
