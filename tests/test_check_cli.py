"""``verl-rfpp check``: one verdict per config, each with its exit status (docs/contract.md
section 6): 0 runs as the contract says, 1 refused (violations, a misspelt name, no activation),
3 Hydra cannot compose the overrides. Real Hydra composition, real `import verl`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from verl_rfpp import cli, validation

BASE = list(validation.RECIPES["reinforce_plus_plus_baseline"])
RFPP = list(validation.RECIPES["reinforce_plus_plus"])


def _check(*overrides, **env):
    result = subprocess.run(
        [sys.executable, "-m", "verl_rfpp.cli", "check", *overrides],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )
    return result.returncode, result.stdout, result.stderr


def test_recipe_is_ok():
    code, out, _ = _check(*BASE)
    assert code == 0 and "OK: this config runs reinforce_plus_plus_baseline" in out


def test_wrong_typed_value_is_a_violation_not_a_traceback(capsys):
    assert cli.main(["check", *BASE, "actor_rollout_ref.rollout.n=abc"]) == 1
    out = capsys.readouterr().out
    assert "actor_rollout_ref.rollout.n = 'abc': required an integer, got str." in out
    assert "Fix: actor_rollout_ref.rollout.n=8" in out


@pytest.mark.parametrize("gamma", ["1.5", "-0.5"])
def test_gamma_outside_the_unit_interval_is_refused_up_front(gamma, capsys):
    assert cli.main(["check", *RFPP, f"algorithm.gamma={gamma}"]) == 1
    out = capsys.readouterr().out
    assert f"algorithm.gamma = {float(gamma)!r}: required within [0, 1]" in out and "Fix: algorithm.gamma=1.0" in out


def test_an_excluded_plugin_fails_with_doctors_cause():
    code, out, _ = _check(*BASE, VERL_USE_EXTERNAL_PLUGINS="none")
    cause = "the plugin is excluded by VERL_USE_EXTERNAL_PLUGINS='none'; set it to 'auto'"
    assert code == 1 and cause in out and "OK" not in out
    doctor = subprocess.run(["verl-rfpp", "doctor"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"})
    assert doctor.returncode == 1
    assert out.strip() in doctor.stdout  # the very same line


@pytest.mark.parametrize(
    "override,words",
    [
        ("algorithm.adv_estimatr=reinforce_plus_plus", ["'algorithm.adv_estimatr=reinforce_plus_plus'", "+algorithm.adv_estimatr"]),
        ("algorithm.gamma=[1", ["'algorithm.gamma=[1'", "no viable alternative"]),
        ("+algorithm.gamma=1", ["'+algorithm.gamma=1'", "already at 'algorithm.gamma'"]),
    ],
    ids=["unknown-key", "bad-syntax", "plus-on-existing-key"],
)
def test_hydra_errors_are_one_short_message_with_their_own_exit_code(override, words):
    code, out, err = _check(*BASE, override)
    assert code == 3, out + err
    assert "Traceback" not in out + err
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verl-rfpp check: Hydra cannot compose")
    for word in words:
        assert word in lines[0]


def test_exit_statuses_are_documented_in_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["check", "--help"])
    text = capsys.readouterr().out
    assert "exit status" in text and "  3  Hydra cannot compose" in text and "  1  violations" in text


@pytest.mark.parametrize(
    "name,meant",
    [
        ("REINFORCE_PLUS_PLUS", "reinforce_plus_plus"),
        ("Reinforce_Plus_Plus_Baseline", "reinforce_plus_plus_baseline"),
        ("reinforce_plus_plus_baselin", "reinforce_plus_plus_baseline"),
        ("reinforce_plus_pluss", "reinforce_plus_plus"),
        ("reinforse_plus_plus", "reinforce_plus_plus"),
        ("reinforce_plusplus", "reinforce_plus_plus"),
    ],
)
def test_a_near_miss_of_our_names_names_the_estimator_meant(name, meant, capsys):
    assert cli.main(["check", *BASE, f"algorithm.adv_estimator={name}"]) == 1
    out = capsys.readouterr().out
    assert f"did you mean {meant}?" in out and f"Fix: algorithm.adv_estimator={meant}" in out


@pytest.mark.parametrize("name", ["grpo", "rloo", "gae", "remax"])
def test_other_estimators_are_left_alone(name, capsys):
    assert cli.main(["check", f"algorithm.adv_estimator={name}"]) == 0
    assert "verl-rfpp does not touch this run" in capsys.readouterr().out


UNSET = "${oc.env:VERL_RFPP_TEST_UNSET_VARIABLE}"


@pytest.mark.parametrize(
    "overrides,key",
    [
        (BASE + [f"actor_rollout_ref.rollout.n={UNSET}"], "actor_rollout_ref.rollout.n"),
        (BASE + [f"algorithm.adv_estimator={UNSET}"], "algorithm.adv_estimator"),
        (RFPP + [f"algorithm.gamma={UNSET}"], "algorithm.gamma"),
        (RFPP + ["algorithm.kl_penalty=${algorithm.no_such_key}"], "algorithm.kl_penalty"),
        (BASE + ["actor_rollout_ref.actor.loss_agg_mode=???"], "actor_rollout_ref.actor.loss_agg_mode"),
        (RFPP + [f"actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size={UNSET}"],
         "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"),
        (RFPP + [f"algorithm.rollout_correction.bypass_mode={UNSET}"], "algorithm.rollout_correction.bypass_mode"),
        (BASE + [f"trainer.use_v1={UNSET}"], "trainer.use_v1"),
    ],
    ids=["rollout-n", "adv-estimator", "gamma", "missing-key-interpolation", "mandatory-value", "ulysses",
         "bypass-mode", "use-v1"],
)
def test_a_key_the_rules_read_that_does_not_resolve_is_one_line_exit_3(overrides, key, capsys, monkeypatch):
    monkeypatch.delenv("VERL_RFPP_TEST_UNSET_VARIABLE", raising=False)
    assert cli.main(["check", *overrides]) == 3
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"verl-rfpp check: cannot resolve {key} (set by override '{key}=")
    assert f"Fix: give {key} a value that resolves" in lines[0]


def test_an_unresolvable_key_no_rule_reads_is_not_our_problem(capsys, monkeypatch):
    monkeypatch.delenv("VERL_RFPP_TEST_UNSET_VARIABLE", raising=False)
    assert cli.main(["check", *BASE, f"actor_rollout_ref.actor.optim.lr={UNSET}"]) == 0
    assert "OK" in capsys.readouterr().out


@pytest.mark.parametrize("override", ["data=null", "model_engine=null", "data=no_such_data_config"])
def test_a_config_group_hydra_cannot_compose_is_one_line_exit_3(override):
    code, out, err = _check(*BASE, override)
    assert code == 3, out + err
    assert "Traceback" not in out + err
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verl-rfpp check: Hydra cannot compose")
    assert f"in override {override!r}" in lines[0]


def test_the_removed_key_fix_is_pasteable(capsys):
    assert cli.main(["check", *RFPP, "~algorithm.kl_ctrl"]) == 1
    out = capsys.readouterr().out
    fixes = [line.split("Fix: ", 1)[1] for line in out.splitlines() if "Fix: " in line]
    assert fixes == ["++algorithm.kl_ctrl.type=fixed", "++algorithm.kl_ctrl.kl_coef=0.01"]
    assert cli.main(["check", *RFPP, "~algorithm.kl_ctrl", *fixes]) == 0
