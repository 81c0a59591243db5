"""results.json, the PNG plots and report.md of a curves run (numbers from tensorboard events)."""

from __future__ import annotations

import json
from pathlib import Path

from verl_rfpp import catalog
from verl_rfpp.cpu import patches
from verl_rfpp.cpu.demo import KL_LOSS, KL_REWARD, REWARD, RFPP_METRICS  # KL_LOSS: k2 in the loss; KL_REWARD: k1
from verl_rfpp.experiments.series import band, mean, series, std

ADV_STD = patches.ADV_STD_METRIC
WINDOW = 5  # steps averaged at the start and at the end
KEPT = (REWARD, KL_LOSS, KL_REWARD, ADV_STD, "critic/advantages/mean", "response_length/mean", "timing_s/step",
        *RFPP_METRICS)  # the tags results.json keeps (each run's run.json has all of them)


def by_method(records: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for record in records:
        grouped.setdefault(record["method"]["label"], []).append(record)
    return grouped


def summarize(records: list[dict]) -> dict[str, dict]:
    """Per method: reward over the first and last WINDOW steps (mean and sample std over seeds),
    the KL and advantage std over the last WINDOW steps, seconds per run, the proofs."""
    table = {}
    for label, runs in by_method(records).items():
        first = [mean(series(r, REWARD)[:WINDOW]) for r in runs]
        last = [mean(series(r, REWARD)[-WINDOW:]) for r in runs]
        kl_tag = KL_LOSS if _groups(runs[0]["method"]["estimator"]) else KL_REWARD
        table[label] = {
            "seeds": len(runs),
            "reward_first": mean(first), "reward_first_std": std(first),
            "reward_last": mean(last), "reward_last_std": std(last),
            "gain": [b - a for a, b in zip(first, last, strict=True)],
            "kl_tag": kl_tag, "kl_last": mean([mean(series(r, kl_tag)[-WINDOW:]) for r in runs]),
            "adv_std": mean([mean(series(r, ADV_STD)) for r in runs]),
            "rfpp_metrics_in_tensorboard": all(all(tag in r["metrics"] for tag in RFPP_METRICS) for r in runs),
            "seconds": mean([r["seconds"] for r in runs]),
            "proof": sorted({r["proof"] for r in runs}),
        }
    return table


def plots(out: Path, records: list[dict]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grouped = by_method(records)
    seeds = max(len(runs) for runs in grouped.values())
    written = []

    def save(figure, name):
        figure.tight_layout()
        path = out / name
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)

    figure, axis = plt.subplots(figsize=(7.5, 4.2))
    for label, runs in grouped.items():
        band(axis, runs, REWARD, label)
    axis.set(xlabel="training step", ylabel="mean reward of the step's responses",
             title=f"Reward (line: mean over {seeds} seeds; band: min..max)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    save(figure, "reward.png")

    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    for label, runs in grouped.items():
        estimator = runs[0]["method"]["estimator"]
        band(axes[0] if _groups(estimator) else axes[1], runs,
              KL_LOSS if _groups(estimator) else KL_REWARD, label)
    axes[0].set(xlabel="training step", ylabel=KL_LOSS, title="k2 KL loss (baseline recipe, GRPO)")
    axes[1].set(xlabel="training step", ylabel=KL_REWARD, title="k1 KL in the reward (REINFORCE++ recipe)")
    for axis in axes:
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=8)
    save(figure, "kl.png")

    figure, axis = plt.subplots(figsize=(7.5, 4.2))
    for label, runs in grouped.items():
        band(axis, runs, ADV_STD, label)
    axis.set(xlabel="training step", ylabel="std of the advantages over valid tokens",
             title="Advantage std per step (population std, all methods measured alike)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    save(figure, "adv_std.png")
    return written


def report(records: list[dict], steps: int) -> str:
    table = summarize(records)
    seeds = max(row["seeds"] for row in table.values())
    lines = [
        "# Learning curves in verl's real trainer (CPU)",
        "",
        f"Written by `verl-rfpp curves`: {len(table)} methods x {seeds} seeds x {steps} steps of verl 0.9.1's",
        "v1 trainer on the CPU backend ([docs/cpu-backend.md](../cpu-backend.md)): the demo task (a random",
        "28K-parameter Qwen2 learns to answer `repeat D:` with digits, first one `D`; reward up to 2), 4",
        "prompts x 4 responses per step, one optimizer step per training step, lr 1e-2. Every method",
        "trains on the same data with the same seeds (the data order and the rollout's sampling; the",
        "model starts from the same weights). Every number here was read back from verl's `tensorboard`",
        "logger's event files.",
        "",
        f"| method | reward, first {WINDOW} steps | reward, last {WINDOW} steps | gain per seed "
        f"| KL, last {WINDOW} steps "
        "| advantage std | `rfpp/` metrics in tensorboard | s per run |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, row in table.items():
        gains = ", ".join(f"{g:+.2f}" for g in row["gain"])
        lines.append(
            f"| {label} | {row['reward_first']:.3f} ± {row['reward_first_std']:.3f} | "
            f"{row['reward_last']:.3f} ± {row['reward_last_std']:.3f} | {gains} | "
            f"{row['kl_last']:.4f} (`{row['kl_tag']}`) | {row['adv_std']:.3f} | "
            f"{'yes' if row['rfpp_metrics_in_tensorboard'] else 'no'} | {row['seconds']:.0f} |")
    lines += [
        "",
        "± is the sample std over seeds. Advantage std: `" + ADV_STD + "`, the population std of the",
        "step's advantages over valid tokens, added to verl's data metrics by the CPU backend (verl logs",
        "only their mean, max and min), the same measure for every method. A step where it is 0 had",
        "nothing to learn: every group's responses got equal rewards (the baseline's raw advantages",
        "are all 0; our `rfpp/var_floor_used` is 1 there, and verl's built-in also gives 0).",
        "",
        "![reward](reward.png)",
        "",
        "![KL](kl.png)",
        "",
        "![advantage std](adv_std.png)",
        "",
        "## Which estimator ran",
        "",
        "Ours ran with the plugin loaded; verl's built-ins and GRPO with `VERL_USE_EXTERNAL_PLUGINS=none`",
        "(verl loads no plugin; the CPU backend itself never imports the plugin). The run trace",
        "(`VERL_RFPP_TRACE`) proves it per run: the plugin writes one line per estimator call, and the",
        "CPU backend's driver hook writes the module verl's registry resolves each REINFORCE++ name to:",
        "",
    ]
    for label, row in table.items():
        lines.append(f"- {label}: {'; '.join(row['proof'])}")
    return "\n".join(lines) + "\n"


def _groups(estimator: str) -> bool:
    """Whether ``estimator`` (a run's ``algorithm.adv_estimator``) uses the group KL loss: ours of the
    group family, or GRPO."""
    return estimator not in catalog.names() or catalog.estimator(estimator).family.groups


def comparison(records: list[dict]) -> str:
    """What differs between ours and verl's built-ins on this task, in numbers, and what cannot."""
    table = summarize(records)
    lines = ["## Ours against verl's built-ins on this task", ""]
    for name in (record.label for record in catalog.ESTIMATORS):
        ours, verl = table.get(f"ours {name}"), table.get(f"verl {name}")
        if not ours or not verl:
            continue
        spread = max(ours["reward_last_std"], verl["reward_last_std"])
        difference = ours["reward_last"] - verl["reward_last"]
        verdict = "within" if abs(difference) <= 2 * spread else "outside"
        lines.append(
            f"- {name}: reward over the last {WINDOW} steps {ours['reward_last']:.3f} (ours) and "
            f"{verl['reward_last']:.3f} (verl's), a difference of {difference:+.3f}, {verdict} twice the "
            f"larger seed spread ({spread:.3f}). Advantage std {ours['adv_std']:.4f} (ours) and "
            f"{verl['adv_std']:.4f} (verl's).")
    lines += [
        "",
        "What differs here, and why it is small: verl whitens with the unbiased variance (`N-1`) plus",
        "`1e-8`, we with the population variance (`N`), so verl's advantages are ours times",
        "`sqrt((N-1)/N)`: 0.992 for the 64 valid tokens of a step, a 0.8% smaller step. The policy",
        "losses differ in name only on this task (`rfpp` for ours, verl's `vanilla` for its built-ins):",
        "with one on-policy update per step every ratio is 1 and no clip is active, so the gradients",
        "are equal. With equal seeds the runs start from the same weights and data order, but sampling",
        "is not reproducible bit for bit (the rollout server answers concurrent requests), so even two",
        "runs of the same method differ; ours and verl's curves should agree within the seed spread,",
        "and the lines above say whether they do.",
        "",
        "What this task cannot show: the differences that change training elsewhere",
        "([docs/differences.md](../differences.md)) do not arise in it. Every response has valid",
        "tokens and every group has 4 members (no singleton group, no v1 padding row, no empty",
        "response), the reward sits on the last valid token (masked reward slots hold zeros, never",
        "NaN), `gamma = 1` and there are no interior mask holes (so discounting by position or by",
        "valid token agree). Those cases are covered by the unit tests against the float64 reference",
        "and by the bandit experiments ([docs/bandit.md](../bandit.md)), not by these curves. Where the methods",
        "differ by design (reward-model noise on prompts with nothing to learn) is measured in verl's trainer by",
        "`verl-rfpp curves --task noisy`: [noisy/report.md](noisy/report.md).",
        "",
        "GRPO (verl's, with the baseline recipe's k2 KL loss) divides each group by its own unbiased",
        "std: a group of 4 with any spread gets advantages of population std `sqrt(3/4) = 0.87`, a group",
        "whose responses all got the same reward gets 0. Its advantage std is so below 1 from the",
        "start and falls as groups become unanimous late in training; the REINFORCE++ methods keep",
        "exactly 1 (ours) or 0.992 (verl's) until a whole step is unanimous.",
    ]
    return "\n".join(lines) + "\n"


def write_report(out: Path, records: list[dict], steps: int, notes: str = "") -> None:
    """results.json (every run's metrics), the three plots and report.md (with ``notes`` appended)."""
    out.mkdir(parents=True, exist_ok=True)
    kept = [{**record, "metrics": {tag: values for tag, values in record["metrics"].items() if tag in KEPT}}
            for record in records]
    (out / "results.json").write_text(json.dumps({"steps": steps, "runs": kept}, indent=1))
    plots(out, records)
    text = report(records, steps) + "\n" + comparison(records)
    (out / "report.md").write_text(text + (("\n" + notes.strip() + "\n") if notes else ""))
