"""verl's real trainers on the CPU with our estimators (python -m verl.trainer.main_ppo in a
subprocess, Ray, FSDP2 workers, hf_cpu rollout, reference model, weight sync). Marked e2e."""

from __future__ import annotations

import re

import pytest

from verl_rfpp.cpu import launch

pytestmark = pytest.mark.e2e


def _pid(line):
    return int(re.search(r"pid=(\d+)", line).group(1))


def _abs_sums(result):
    return [float(line.rsplit("=", 1)[1]) for line in result.trace if line.startswith("weights ")]


@pytest.mark.parametrize(
    "estimator,legacy",
    [("reinforce_plus_plus_baseline", False), ("reinforce_plus_plus", False), ("reinforce_plus_plus_baseline", True)],
    ids=["baseline-v1", "rfpp-v1", "baseline-legacy"],
)
def test_two_real_training_steps(estimator, legacy, tmp_path):
    result = launch.run(estimator, tmp_path, steps=2, legacy=legacy, echo=False, timeout=600)
    log_tail = "".join(result.log[-60:])
    assert result.returncode == 0, log_tail
    assert sorted(result.steps) == [1, 2], log_tail

    # our estimator computed the advantages, in verl's driver process (the TaskRunner)
    calls = [line for line in result.trace if line.startswith(estimator + " ")]
    assert len(calls) == 2
    assert {_pid(line) for line in calls} <= result.driver_pids and result.driver_pids

    for step in (1, 2):  # the rfpp/ metrics reached verl's console logger every step
        metrics = result.steps[step]
        for name in ("raw_adv_mean", "raw_adv_std", "adv_mean", "adv_std", "valid_tokens", "var_floor_used"):
            assert f"rfpp/{name}" in metrics
        assert metrics["rfpp/valid_tokens"] > 0

    if estimator == "reinforce_plus_plus_baseline":
        assert result.steps[1]["actor/kl_loss"] == 0.0  # the policy starts at the reference
        assert result.steps[2]["actor/kl_loss"] > 0.0
    else:
        # k1 shaping reached the returns: raw advantages are no longer the pure outcome reward
        step2 = result.steps[2]
        assert step2["actor/reward_kl_penalty"] > 0.0
        assert step2["rfpp/raw_adv_mean"] != pytest.approx(step2["critic/score/mean"], abs=1e-9)

    # the actor's weights changed: every sync to the rollout carries different weights
    sums = _abs_sums(result)
    assert len(sums) >= 3 and len(set(sums)) == len(sums)
