"""The config contract (docs/contract.md section 6) over configs composed from verl's real ppo_trainer."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from verl_rfpp import validation
from verl_rfpp.cli import compose_verl_config

RFPP = list(validation.RECIPES["reinforce_plus_plus"])
BASE = list(validation.RECIPES["reinforce_plus_plus_baseline"])
AR = "actor_rollout_ref"

# (id, overrides, keys that must be reported; empty = accepted)
CASES = [
    ("base-n1", BASE + [f"{AR}.rollout.n=1"], {f"{AR}.rollout.n"}),
    ("base-token-mean", BASE + [f"{AR}.actor.loss_agg_mode=token-mean"], {f"{AR}.actor.loss_agg_mode"}),
    ("rfpp-seq-mean-token-sum", RFPP + [f"{AR}.actor.loss_agg_mode=seq-mean-token-sum"], {f"{AR}.actor.loss_agg_mode"}),
    # verl interpolates the reference model's size from the actor's: both are reported
    ("base-actor-ulysses", BASE + [f"{AR}.actor.ulysses_sequence_parallel_size=2"],
     {f"{AR}.actor.ulysses_sequence_parallel_size", f"{AR}.ref.ulysses_sequence_parallel_size"}),
    ("rfpp-fsdp-ulysses", RFPP + [f"{AR}.actor.fsdp_config.ulysses_sequence_parallel_size=2"], {f"{AR}.actor.fsdp_config.ulysses_sequence_parallel_size"}),
    ("base-ref-ulysses", BASE + [f"{AR}.ref.ulysses_sequence_parallel_size=4"], {f"{AR}.ref.ulysses_sequence_parallel_size"}),
    ("base-megatron-cp", BASE + [f"+{AR}.actor.megatron.context_parallel_size=2"], {f"{AR}.actor.megatron.context_parallel_size"}),
    ("rfpp-torchtitan-cp", RFPP + [f"+{AR}.actor.torchtitan.context_parallel_size=2"], {f"{AR}.actor.torchtitan.context_parallel_size"}),
    ("rfpp-ref-veomni-sp", RFPP + [f"+{AR}.ref.veomni.ulysses_parallel_size=2"], {f"{AR}.ref.veomni.ulysses_parallel_size"}),
    ("base-colocate-async", BASE + ["trainer.v1.trainer_mode=colocate_async"], {"trainer.v1.trainer_mode"}),
    ("rfpp-separate-async", RFPP + ["trainer.v1.trainer_mode=separate_async"], {"trainer.v1.trainer_mode"}),
    ("base-sync-step-2", BASE + ["+trainer.v1.sync.parameter_sync_step=2"], {"trainer.v1.sync.parameter_sync_step"}),
    ("base-fully-async", BASE + ["+async_training.staleness_threshold=1"], {"async_training"}),
    ("rfpp-kl-as-loss", RFPP + ["algorithm.use_kl_in_reward=False", f"{AR}.actor.use_kl_loss=True"],
     {f"{AR}.actor.use_kl_loss", "algorithm.use_kl_in_reward"}),
    ("rfpp-kl-twice", RFPP + [f"{AR}.actor.use_kl_loss=True"], {f"{AR}.actor.use_kl_loss"}),
    ("rfpp-k3-in-reward", RFPP + ["algorithm.kl_penalty=low_var_kl"], {"algorithm.kl_penalty"}),
    ("rfpp-adaptive-kl", RFPP + ["algorithm.kl_ctrl.type=adaptive"], {"algorithm.kl_ctrl.type"}),
    ("base-kl-in-reward", BASE + ["algorithm.use_kl_in_reward=True"], {"algorithm.use_kl_in_reward"}),
    ("base-k3-loss", BASE + [f"{AR}.actor.kl_loss_type=low_var_kl"], {f"{AR}.actor.kl_loss_type"}),
    ("base-k1-loss", BASE + [f"{AR}.actor.kl_loss_type=kl"], {f"{AR}.actor.kl_loss_type"}),
    ("base-rejection-sampling", BASE + ["algorithm.rollout_correction.rollout_rs=token"], {"algorithm.rollout_correction.rollout_rs"}),
    ("base-bypass-mode", BASE + ["algorithm.rollout_correction.bypass_mode=True"], {"algorithm.rollout_correction.bypass_mode"}),
    ("base-vanilla-dual-clip", BASE + [f"{AR}.actor.policy_loss.loss_mode=vanilla"], {f"{AR}.actor.policy_loss.loss_mode"}),
    ("rfpp-gspo", RFPP + [f"{AR}.actor.policy_loss.loss_mode=gspo"], {f"{AR}.actor.policy_loss.loss_mode"}),
    ("base-verl-defaults", ["algorithm.adv_estimator=reinforce_plus_plus_baseline"],
     {f"{AR}.actor.loss_agg_mode", f"{AR}.actor.policy_loss.loss_mode", f"{AR}.rollout.n"}),
    ("rfpp-verl-defaults", ["algorithm.adv_estimator=reinforce_plus_plus"],
     {f"{AR}.actor.loss_agg_mode", f"{AR}.actor.policy_loss.loss_mode"}),
    # wrong-typed values a rule reads, and gamma outside [0, 1]: violations, never a TypeError
    ("base-n-not-a-number", BASE + [f"{AR}.rollout.n=abc"], {f"{AR}.rollout.n"}),
    ("base-n-float", BASE + [f"{AR}.rollout.n=8.5"], {f"{AR}.rollout.n"}),
    ("rfpp-kl-loss-not-a-bool", RFPP + [f"{AR}.actor.use_kl_loss=maybe"], {f"{AR}.actor.use_kl_loss"}),
    ("rfpp-v1-not-a-bool", RFPP + ["trainer.use_v1=yes_please"], {"trainer.use_v1"}),
    ("base-sp-not-a-number", BASE + [f"+{AR}.actor.megatron.context_parallel_size=two"],
     {f"{AR}.actor.megatron.context_parallel_size"}),
    ("rfpp-gamma-not-a-number", RFPP + ["algorithm.gamma=high"], {"algorithm.gamma"}),
    ("rfpp-gamma-above-one", RFPP + ["algorithm.gamma=1.5"], {"algorithm.gamma"}),
    ("base-gamma-negative", BASE + ["algorithm.gamma=-0.1"], {"algorithm.gamma"}),
    # accepted: the recipes and legal variants
    ("base-recipe", BASE, set()),
    ("rfpp-recipe", RFPP, set()),
    ("base-mse-alias", BASE + [f"{AR}.actor.kl_loss_type=mse"], set()),
    ("base-kl-off", BASE + [f"{AR}.actor.use_kl_loss=False"], set()),
    ("rfpp-kl-off", RFPP + ["algorithm.use_kl_in_reward=False"], set()),
    ("rfpp-gamma", RFPP + ["algorithm.gamma=0.99"], set()),
    ("rfpp-gamma-zero-int", RFPP + ["algorithm.gamma=0"], set()),
    ("rfpp-gamma-null", RFPP + ["algorithm.gamma=null"], set()),
    ("base-legacy-trainer", BASE + ["trainer.use_v1=False", f"{AR}.rollout.n=4"], set()),
    ("rfpp-k1-alias-n4", RFPP + ["algorithm.kl_penalty=k1", f"{AR}.rollout.n=4"], set()),
    ("base-v1-sync-explicit", BASE + ["trainer.v1.trainer_mode=sync", "+trainer.v1.sync.parameter_sync_step=1"], set()),
    ("base-importance-weights", BASE + ["algorithm.rollout_correction.rollout_is=token"], set()),
    ("base-async-rollout-hybrid", BASE + [f"{AR}.rollout.mode=async", f"{AR}.hybrid_engine=True"], set()),
    # other estimators: never touched, whatever their settings
    ("grpo-anything", ["algorithm.adv_estimator=grpo", f"{AR}.rollout.n=1", "trainer.v1.trainer_mode=colocate_async",
                       f"{AR}.actor.ulysses_sequence_parallel_size=2", "algorithm.use_kl_in_reward=True"], set()),
    ("gae-anything", ["algorithm.adv_estimator=gae", f"{AR}.actor.kl_loss_type=low_var_kl", "+async_training.x=1"], set()),
    ("rloo-anything", ["algorithm.adv_estimator=rloo", f"{AR}.actor.policy_loss.loss_mode=vanilla"], set()),
]


@pytest.mark.parametrize("overrides,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_contract_table(overrides, expected):
    config = compose_verl_config(overrides)
    found = validation.violations(config)
    assert {violation.key for violation in found} == expected
    if not expected:
        validation.enforce(config)
        return
    with pytest.raises(validation.ConfigViolationError) as raised:
        validation.enforce(config)
    message = str(raised.value)
    for violation in found:
        assert violation.key in message and f"Fix: {violation.fix}" in message
        assert "docs/contract.md section" in violation.why
    # every printed fix repairs its violation
    repaired = compose_verl_config(overrides + [v.fix for v in found if "=" in v.fix])
    assert {v.key for v in validation.violations(repaired)} <= {"async_training"}


def _key(override):
    return override.split("=", 1)[0].lstrip("+~")


@pytest.mark.parametrize("overrides,expected", [c[1:] for c in CASES if c[2]], ids=[c[0] for c in CASES if c[2]])
def test_every_fix_works_pasted_as_shown(overrides, expected):
    """Each printed fix, alone: appended to the command, and in place of the offending override."""
    for violation in validation.violations(compose_verl_config(overrides)):
        if "=" not in violation.fix:
            continue  # the prose fix of async_training (a different launcher)
        appended = overrides + [violation.fix]
        replaced = [o for o in overrides if _key(o) != violation.key] + [violation.fix]
        for attempt in (appended, replaced):
            assert violation.key not in {v.key for v in validation.violations(compose_verl_config(attempt))}


def test_keys_fixed_with_double_plus_are_exactly_those_verl_lacks():
    base = compose_verl_config([])
    rule_keys = set(validation.PARALLEL_SIZE_KEYS) | set(validation._TYPED_KEYS)
    missing = object()
    absent = {key for key in rule_keys if OmegaConf.select(base, key, default=missing) is missing}
    assert absent == set(validation.ADDED_KEYS)


def test_table_is_large_enough():
    assert len(CASES) >= 25
    assert sum(1 for case in CASES if not case[2]) >= 7


@pytest.mark.parametrize(
    "overrides,phrase",
    [
        (RFPP + ["algorithm.gamma=0.9"], "discounted by position"),
        (BASE + [f"{AR}.actor.use_kl_loss=False"], "KL regularization is off entirely"),
        (RFPP + ["algorithm.kl_ctrl.kl_coef=0"], "no effect"),
    ],
)
def test_unusual_settings_pass_with_a_warning(overrides, phrase, caplog):
    with caplog.at_level(logging.WARNING, logger="verl_rfpp"):
        validation.enforce(compose_verl_config(overrides))
    assert phrase in caplog.text


def test_main_ppo_refuses_before_ray_starts(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=reinforce_plus_plus_baseline",
         f"hydra.run.dir={tmp_path}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "verl_rfpp refuses this config" in output
    assert "Fix: actor_rollout_ref.rollout.n=8" in output
    assert "ray init kwargs" not in output and "Started a local Ray instance" not in output


def test_main_ppo_refuses_a_wrong_typed_value_without_a_traceback_from_a_rule(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", *BASE, f"{AR}.rollout.n=abc", f"hydra.run.dir={tmp_path}"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "RAY_ADDRESS": ""},
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert f"{AR}.rollout.n = 'abc': required an integer, got str" in output
    assert "TypeError" not in output and "Started a local Ray instance" not in output
