"""``verl-rfpp check``: one verdict per config, each with its exit status (docs/contract.md
section 6): 0 runs as the contract says, 1 refused (violations, a misspelt name, no activation),
2 usage, 3 Hydra cannot compose the overrides. Real Hydra composition, real `import verl`."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from verl_rfpp import validation
from verl_rfpp.cli import main as cli

pytestmark = pytest.mark.usefixtures("cached_composition")  # tests/conftest.py: the tier's cached composition

BASE = list(validation.RECIPES["reinforce_plus_plus_baseline"])
RFPP = list(validation.RECIPES["reinforce_plus_plus"])


def _check(*overrides, **env):
    result = subprocess.run(
        [sys.executable, "-m", "verl_rfpp.cli", "check", *overrides],
        capture_output=True, text=True, timeout=300, env={**os.environ, **env},
    )
    return result.returncode, result.stdout, result.stderr


@pytest.mark.slow
def test_recipe_is_ok_and_check_prints_only_its_own_lines():
    """Nothing but the verdict, also where check imports verl and asks its hooks (here: the plugin
    loaded through VERL_USE_EXTERNAL_MODULES, which the installed packages cannot settle): verl's
    import-time warnings (engines, accelerator), none of them an error, are not mentioned; -v shows
    them."""
    verdict = "OK: this config runs reinforce_plus_plus_baseline as docs/contract.md defines it; KL: k2 loss, " \
              "coefficient 0.01."
    for env in ({}, {"VERL_USE_EXTERNAL_MODULES": "verl_rfpp.plugin"}):
        code, out, err = _check(*BASE, **env)
        assert (code, out.splitlines(), err) == (0, [verdict], ""), env
    code, out, err = _check("-v", *BASE, VERL_USE_EXTERNAL_MODULES="verl_rfpp.plugin")
    assert code == 0 and out.splitlines() == [verdict] and "veomni engine is not available" in err
    code, out, err = _check(*BASE, "actor_rollout_ref.rollout.n=1")
    assert code == 1 and err == "" and out.splitlines()[-1] == "Fix: actor_rollout_ref.rollout.n=8"


def test_wrong_typed_value_is_a_violation_not_a_traceback(capsys):
    assert cli.main(["check", *BASE, "actor_rollout_ref.rollout.n=abc"]) == 1
    out = capsys.readouterr().out
    assert "actor_rollout_ref.rollout.n = 'abc': required an integer, got str." in out
    assert out.strip().splitlines()[-1] == "Fix: actor_rollout_ref.rollout.n=8"


@pytest.mark.parametrize("gamma", ["1.5", "-0.5"])
def test_gamma_outside_the_unit_interval_is_refused_up_front(gamma, capsys):
    assert cli.main(["check", *RFPP, f"algorithm.gamma={gamma}"]) == 1
    out = capsys.readouterr().out
    assert f"[6.2.10] algorithm.gamma = {float(gamma)!r}: required within [0, 1]" in out
    assert out.strip().splitlines()[-1] == "Fix: algorithm.gamma=1.0"


@pytest.mark.slow
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
        ("algorithm.adv_estimatr=reinforce_plus_plus",
         ["'algorithm.adv_estimatr=reinforce_plus_plus'", "+algorithm.adv_estimatr"]),
        ("algorithm.gamma=[1", ["'algorithm.gamma=[1'", "no viable alternative"]),
        ("+algorithm.gamma=1", ["'+algorithm.gamma=1'", "already at 'algorithm.gamma'"]),
    ],
    ids=["unknown-key", "bad-syntax", "plus-on-existing-key"],
)
def test_hydra_errors_are_one_short_message_with_their_own_exit_code(override, words, capfd):
    code = cli.main(["check", *BASE, override])
    out, err = capfd.readouterr()  # file descriptors 1 and 2: whatever Hydra or a logger writes
    assert code == 3, out + err
    assert "Traceback" not in out + err
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verl-rfpp check: Hydra cannot compose")
    for word in words:
        assert word in lines[0]


def test_exit_statuses_are_documented_in_help(capsys):
    assert cli.main(["check", "--help"]) == 0
    text = capsys.readouterr().out
    assert "exit status" in text and "  3  Hydra cannot compose" in text and "  1  refused: rule violations" in text
    assert "  0  the config runs" in text
    assert "  2  usage: a bad option, a file that is not a bash script, a script check cannot read safely" in text
    assert "--config-path" in text and "SCRIPT" in text


@pytest.mark.parametrize(
    "name,meant",
    [
        ("REINFORCE_PLUS_PLUS", "reinforce_plus_plus"),
        ("Reinforce_Plus_Plus_Baseline", "reinforce_plus_plus_baseline"),
        ("reinforce_plus_plus_baselin", "reinforce_plus_plus_baseline"),
        ("reinforce_plus_pluss", "reinforce_plus_plus"),
        ("reinforse_plus_plus", "reinforce_plus_plus"),
        ("reinforce_plusplus", "reinforce_plus_plus"),
        # the spellings of issue 24: ++ / pp / plus, - or _, the rf abbreviation
        ("reinforce++", "reinforce_plus_plus"),
        ("rf++", "reinforce_plus_plus"),
        ("reinforce-plus-plus-baseline", "reinforce_plus_plus_baseline"),
        ("reinforce_pp_baseline", "reinforce_plus_plus_baseline"),
        ("reinforceplusplus", "reinforce_plus_plus"),
        ("RF++-Baseline", "reinforce_plus_plus_baseline"),
    ],
)
def test_a_near_miss_of_our_names_names_the_estimator_meant(name, meant, capsys):
    assert cli.main(["check", *BASE, f"algorithm.adv_estimator={name}"]) == 1
    out = capsys.readouterr().out
    assert f"did you mean {meant}?" in out and out.strip().splitlines()[-1] == f"Fix: algorithm.adv_estimator={meant}"
    recipe = validation.RECIPES[meant]
    assert cli.main(["check", *recipe, f"algorithm.adv_estimator={name}", f"algorithm.adv_estimator={meant}"]) == 0


@pytest.mark.parametrize("name", ["grpo", "rloo", "gae", "remax", "reinforce_plus_plus", "opo", "grpo_passk"])
def test_a_name_verls_registry_holds_is_never_read_as_a_misspelling(name):
    from verl.trainer.ppo import core_algos

    assert name in core_algos.ADV_ESTIMATOR_REGISTRY
    assert all(validation.near_miss(known) is None for known in core_algos.ADV_ESTIMATOR_REGISTRY)


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
def test_a_config_group_hydra_cannot_compose_is_one_line_exit_3(override, capfd):
    code = cli.main(["check", *BASE, override])
    out, err = capfd.readouterr()
    assert code == 3, out + err
    assert "Traceback" not in out + err
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("verl-rfpp check: Hydra cannot compose")
    assert f"in override {override!r}" in lines[0]


def test_the_removed_key_fix_is_pasteable(capsys):
    assert cli.main(["check", *RFPP, "~algorithm.kl_ctrl"]) == 1
    out = capsys.readouterr().out
    assert "[6.2.9] algorithm.kl_ctrl.type = <absent>" in out
    fixes = shlex.split(out.strip().splitlines()[-1][len("Fix: "):])
    assert fixes == ["++algorithm.kl_ctrl.type=fixed", "++algorithm.kl_ctrl.kl_coef=0.01"]
    assert cli.main(["check", *RFPP, "~algorithm.kl_ctrl", *fixes]) == 0


AR = "actor_rollout_ref"


@pytest.mark.parametrize("overrides,rule", [
    (RFPP + ["algorithm.kl_ctrl.kl_coef=-0.01"], "6.2.11"), (RFPP + ["algorithm.kl_ctrl.kl_coef=nan"], "6.2.11"),
    (RFPP + ["algorithm.kl_ctrl.kl_coef=inf"], "6.2.11"), (BASE + [f"{AR}.actor.kl_loss_coef=-0.01"], "6.2.11"),
    (BASE + [f"{AR}.actor.kl_loss_coef=nan"], "6.2.11"), (BASE + [f"{AR}.actor.clip_ratio_low=1.5"], "6.2.12"),
    (RFPP + [f"{AR}.actor.clip_ratio_high=-0.1"], "6.2.12"),
    (RFPP + ["+async_training.staleness_threshold=1"], "6.2.5"),
    (RFPP + [f"{AR}.actor.use_kl_loss=True", "algorithm.use_kl_in_reward=False"], "6.2.6"),
    (BASE + ["algorithm.use_kl_in_reward=True", f"{AR}.actor.use_kl_loss=False"], "6.2.7"),
])
def test_a_refusal_ends_with_a_fix_line_that_pasted_gives_ok_with_kl_on(overrides, rule, capsys):
    assert cli.main(["check", *overrides]) == 1
    out = capsys.readouterr().out
    assert f"[{rule}]" in out
    fixes = shlex.split(out.strip().splitlines()[-1][len("Fix: "):])
    assert cli.main(["check", *overrides, *fixes]) == 0
    out = capsys.readouterr().out
    assert "OK: this config runs" in out and "KL regularization is off" not in out


@pytest.mark.parametrize("kind", ["k2+", "mse+"])
def test_k2_plus_is_k2_by_verls_code(kind, capsys):
    """verl 0.9.1's kl_penalty(.., "k2+"): b - b.detach() + f.detach() with b = f = 0.5 (logp - ref)^2."""
    import torch
    from verl.trainer.ppo.core_algos import kl_penalty

    logp = torch.randn(64, dtype=torch.float64, requires_grad=True)
    ref = torch.randn(64, dtype=torch.float64)
    k2 = kl_penalty(logp, ref, "k2")
    plus = kl_penalty(logp, ref, kind)
    assert torch.equal(plus, k2) and torch.equal(plus, 0.5 * (logp - ref).detach() ** 2)
    (grad_k2,) = torch.autograd.grad(k2.sum(), logp)
    (grad_plus,) = torch.autograd.grad(plus.sum(), logp)
    assert torch.equal(grad_plus, grad_k2)
    assert cli.main(["check", *BASE, f"{AR}.actor.kl_loss_type={kind}"]) == 0


def test_tests_import_no_cli_internals():
    tests = Path(__file__).resolve().parents[1]
    for path in tests.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"\bcli\._|from verl_rfpp\.cli\.main import (?!main\b)", text), path.name


@pytest.mark.parametrize("variable,value,words", [
    ("VERL_RFPP_DRIVER_VERSION", "0.0.1", "the job gets the driver's version"),
    ("VERL_USE_EXTERNAL_PLUGINS", "none", "VERL_USE_EXTERNAL_PLUGINS"),
])
def test_a_users_runtime_env_touching_the_plugins_job_env_is_a_warning_of_check(variable, value, words, capsys):
    """contract 8.6: check warns (and still accepts) where the user's runtime_env meets what the plugin needs."""
    override = f"+ray_kwargs.ray_init.runtime_env.env_vars.{variable}={value}"
    assert cli.main(["check", *BASE, override]) == 0
    out = capsys.readouterr().out
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert any(words in line and variable in line for line in warnings), out
    assert out.rstrip().endswith("as docs/contract.md defines it; KL: k2 loss, coefficient 0.01.")


@pytest.mark.parametrize("content,words", [
    ("algorithm:\n  adv_estimator: grpo\n", "is a YAML/JSON config, not a script"),
    ("algorithm.adv_estimator=grpo\n", "is a list of overrides, not a script"),
    (None, "is a directory"), ("python3 -m verl.trainer.main_ppo\r\n", "CRLF"),
])
def test_only_a_bash_script_is_read_as_one_in_one_line_exit_2(content, words, capsys, tmp_path):
    path = tmp_path / "input.yaml" if content is None or "adv_estimator:" in content else tmp_path / "input.sh"
    if content is None:
        path.mkdir()
    else:
        path.write_text(content, newline="")
    assert cli.main(["check", str(path)]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and ("check takes" in lines[0] or "dos2unix" in lines[0]), lines
    assert cli.main(["check", str(tmp_path / "missing.sh")]) == 2
    assert "no such file" in capsys.readouterr().out


def test_an_unknown_option_before_the_overrides_is_one_line_exit_2(capsys):
    assert cli.main(["check", "--model", "x", *BASE]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "--model" in lines[0]


OTHER_PYTHON = "+ray_kwargs.ray_init.runtime_env.py_executable=/opt/venv/bin/python"


def _warnings(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("warning: ")]


def test_a_refusal_prints_the_warnings_its_accepted_run_prints(capsys):
    """The note on the workers' separate Python (and the KL's, which the fix decides) comes with the
    refusal the user fixes first, the very lines the run accepted with the Fix prints."""
    refused_run = [*BASE, "actor_rollout_ref.rollout.n=1", "actor_rollout_ref.actor.use_kl_loss=False", OTHER_PYTHON]
    assert cli.main(["check", *refused_run]) == 1
    refused = capsys.readouterr().out
    fixes = refused.splitlines()[-1].removeprefix("Fix: ").split()
    assert cli.main(["check", *refused_run, *fixes]) == 0
    accepted = capsys.readouterr().out
    assert len(_warnings(accepted)) == 2 and "runtime_env.py_executable gives the job's workers" in accepted
    assert _warnings(refused) == _warnings(accepted)
    assert refused.splitlines()[len(_warnings(accepted))].startswith("verl_rfpp refuses this config")


def test_a_scripts_refusal_prints_the_warnings_of_the_fixed_command(capsys, tmp_path):
    script = tmp_path / "run.sh"
    script.write_text("python3 -m verl.trainer.main_ppo " + " ".join([*BASE, "actor_rollout_ref.rollout.n=1",
                                                                       OTHER_PYTHON]) + ' "$@"\n')
    assert cli.main(["check", str(script)]) == 1
    refused = capsys.readouterr().out
    command = shlex.split(refused.splitlines()[-1].removeprefix("Fix: "))
    assert command[:2] == ["bash", str(script)]
    assert cli.main(["check", *command[1:]]) == 0
    accepted = capsys.readouterr().out
    assert _warnings(accepted) and _warnings(refused) == _warnings(accepted)
