"""``verl-rfpp curves --task noisy``: a 1-step ``--quick`` run of verl's built-in with the plugin
excluded in verl's real trainer, whose probe metrics come back from tensorboard (the task's pieces
and the report's numbers: tests/curves/test_curves_noisy.py)."""

from __future__ import annotations

import json
import math

import pytest

from verl_rfpp.cli import main as cli
from verl_rfpp.experiments import report
from verl_rfpp.experiments.noisy import task as noisy_task

P = noisy_task.PREFIX


@pytest.mark.e2e
def test_quick_noisy_run_of_verls_builtin_with_the_plugin_excluded(tmp_path, capsys):
    """``--quick`` (1 step, 1 seed) of verl's built-in REINFORCE++-baseline with the plugin
    excluded (the comparison ``curves`` draws; ours in verl's trainer, with tensorboard and the
    trace's proof, is held by tests/e2e/test_end_to_end.py): the probe's metrics reach verl's
    tensorboard every step, measure the policy after that step's update, and see the stated noise;
    no ``rfpp/`` metric and no call of ours appear."""
    code = cli.main(["curves", "--task", "noisy", "--quick", "--out", str(tmp_path), "--methods", "verl_baseline"])
    assert code == 0, capsys.readouterr().out[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    (run,) = results["runs"]
    assert run["proof"] == "no verl_rfpp estimator call; registry -> verl.trainer.ppo.core_algos"
    metrics = run["metrics"]  # read back from the tensorboard event files
    assert not any(tag.startswith("rfpp/") for tag in metrics)
    for tag in noisy_task.METRICS:
        assert [step for step, _ in metrics[tag]] == [1], tag
    assert [value for _, value in metrics[P + "probe_policy_step"]] == [1.0]  # the weights after the update
    assert [value for _, value in metrics["response_length/mean"]] == [1.0]  # one-token answers
    # verl divides by the unbiased std plus an epsilon: over the step's 256 one-token answers the
    # population std of its advantages is sqrt(255/256) < 1 (ours gives exactly 1: rfpp/adv_std in
    # tests/e2e/test_end_to_end.py)
    for _, value in metrics[report.ADV_STD]:
        assert value == pytest.approx((255 / 256) ** 0.5, abs=1e-5)
    for _, value in metrics[P + "noise_std_sampled"]:
        assert 0.08 < value < 0.12  # 256 draws of N(0, 0.1^2): the std's sd is about 0.0044
    # global normalization: flat groups' centred noise (std ~0.1) is small beside informative spreads (~1)
    for (_, flat), (_, informative) in zip(metrics[P + "flat_adv_rms"], metrics[P + "informative_adv_rms"],
                                           strict=True):
        assert flat < informative
    for (_, kl), (_, entropy) in zip(metrics[P + "flat_kl_from_start"], metrics[P + "flat_entropy"], strict=True):
        assert 0 < kl < 1 and 0 < entropy <= math.log(30)
    for name in ("flat_kl_rows_reset", "flat_kl_shared_reset"):  # the channel probe, read in verl's driver
        assert all(0 < value < 1 for _, value in metrics[P + name]), name
    for name in ("report.md", "noisy_lr0.005.png"):
        assert (tmp_path / name).exists()
