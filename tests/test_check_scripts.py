"""``verl-rfpp check SCRIPT [ARGUMENTS]`` on launch scripts (docs/contract.md sections 6.2, 6.5):
verl's own example scripts (tests/scripts/, copied from verl's repository), the project's
examples/, and scripts of the same shapes. For each: the first verdict and its rule ids, the
printed Fix: command, and that command checked again: OK, with the KL the script had still on
(in the method's form, with the script's coefficient). Real bash, real Hydra composition."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from checking import check as _check
from checking import kl as _kl

from verl_rfpp import scripts, validation
from verl_rfpp.plugin.compose import compose_verl_config

pytestmark = pytest.mark.slow  # runs launch scripts (bash) with stand-ins

HERE = Path(__file__).resolve().parent
VERL_SCRIPTS = HERE / "scripts"
EXAMPLES = sorted((HERE.parent / "examples").glob("*.sh"))
BASELINE, RFPP = validation.BASELINE, validation.REINFORCE_PLUS_PLUS


def _run_config(script, arguments):
    """The config the script runs with ``arguments`` (read as check reads it)."""
    run = scripts.parse_main_ppo(scripts.record_launch(Path(script), arguments).arguments)
    return compose_verl_config(run.overrides, run.config_path, run.config_name)


# (script, the script's arguments, rule ids of the first check, the KL coefficient it had on)
TABLE = [
    ("verl_run_qwen2-7b_math_rf.sh", [], {"6.2.2", "6.2.3"}, 0.001),
    ("verl_run_qwen2-7b_math_rf.sh", [f"algorithm.adv_estimator={BASELINE}"], {"6.2.2", "6.2.3", "6.2.7"}, 0.001),
    ("verl_run_qwen3-8b.sh", [f"algorithm.adv_estimator={BASELINE}"], {"6.2.2", "6.2.3", "6.2.7"}, 0.001),
    ("verl_run_qwen3-8b.sh", [f"algorithm.adv_estimator={RFPP}"], {"6.2.2", "6.2.3", "6.2.6"}, 0.001),
    ("verl_run_qwen2-7b_math_megatron.sh", [f"algorithm.adv_estimator={BASELINE}"], {"6.2.2", "6.2.3", "6.2.7"},
     0.001),
    ("verl_run_qwen2-7b_seq_balance.sh", [f"algorithm.adv_estimator={RFPP}"], {"6.2.2", "6.2.3", "6.2.6"}, 0.001),
]


@pytest.mark.parametrize("script,arguments,rules,coefficient", TABLE,
                         ids=[f"{t[0]}{'-' + t[1][0].split('=')[1] if t[1] else ''}" for t in TABLE])
def test_verls_example_scripts_get_a_fix_command_that_runs_the_method_with_their_kl(
        script, arguments, rules, coefficient, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = VERL_SCRIPTS / script
    code, out = _check(capsys, path, *arguments)
    assert code == 1 and set(re.findall(r"\[(6\.2\.\d+)\]", out)) == rules, out
    fix = out.strip().splitlines()[-1]
    assert fix.startswith(f"Fix: bash {path} ")
    command = shlex.split(fix[len("Fix: "):])
    code, out = _check(capsys, *command[1:])
    assert code == 0 and "OK: this config runs" in out, out
    config = _run_config(command[1], command[2:])
    estimator = validation.estimator_of(config)
    kl = _kl(config)
    expected = {"reward": coefficient, "loss": False} if estimator == RFPP else {"reward": False, "loss": coefficient}
    assert kl == expected


@pytest.mark.parametrize("script", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_the_projects_examples_are_ok(script, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = _check(capsys, script)
    assert code == 0 and "OK: this config runs" in out, out


def _script(tmp_path, body, name="run.sh"):
    path = tmp_path / name
    path.write_text("set -x\n" + body)
    return path


RECIPE = " ".join(validation.RECIPES[BASELINE])


@pytest.mark.parametrize("launcher", [
    "python3 -m verl.trainer.main_ppo", "python -u -m verl.trainer.main_ppo", "uv run python3 -m verl.trainer.main_ppo",
    "torchrun --nproc_per_node=1 -m verl.trainer.main_ppo",
    "ray job submit --address=x -- python3 -m verl.trainer.main_ppo",
])
def test_every_launcher_is_read_and_nothing_runs_past_the_call(launcher, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran-past-the-call"
    path = _script(tmp_path, f'python3 -c "raise SystemExit(3)" && true\n{launcher} {RECIPE} "$@"\ntouch {marker}\n')
    code, out = _check(capsys, path, "actor_rollout_ref.rollout.n=1")
    assert code == 1 and "[6.2.1] actor_rollout_ref.rollout.n = 1" in out, out
    assert not marker.exists()
    assert out.strip().splitlines()[-1] == (
        f"Fix: bash {path} actor_rollout_ref.rollout.n=1 actor_rollout_ref.rollout.n=8")


def test_a_script_that_launches_nothing_or_several_runs_is_named_exit_2(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = _check(capsys, _script(tmp_path, "echo preparing data\n", "nothing.sh"))
    assert code == 2 and "launches no run" in out and "verl.trainer.main_ppo" in out
    two = f"python3 -m verl.trainer.main_ppo {RECIPE}\npython3 -m verl.trainer.main_ppo {RECIPE} trainer.seed=2\n"
    code, out = _check(capsys, _script(tmp_path, two, "two.sh"))
    assert code == 2 and "2 lines that start verl.trainer.main_ppo: several runs" in out


def test_a_script_that_does_not_pass_its_arguments_on_says_so(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _script(tmp_path, f"python3 -m verl.trainer.main_ppo {RECIPE} actor_rollout_ref.actor.kl_loss_coef=-1\n")
    code, out = _check(capsys, path)
    lines = out.strip().splitlines()
    assert code == 1 and "does not pass its own arguments on to main_ppo" in lines[-2]
    assert lines[-1] == f"Fix: bash {path} actor_rollout_ref.actor.kl_loss_coef=0.01"


def _own_config(tmp_path):
    directory = tmp_path / "my_config"
    directory.mkdir()
    (directory / "my_run.yaml").write_text(
        "hydra:\n  searchpath:\n    - pkg://verl.trainer.config\n"
        "defaults:\n  - ppo_trainer\n  - _self_\n"
        "algorithm:\n  adv_estimator: reinforce_plus_plus_baseline\n  use_kl_in_reward: true\n"
        "  kl_ctrl:\n    kl_coef: 0.004\n"
        "actor_rollout_ref:\n  rollout:\n    n: 4\n  actor:\n    use_kl_loss: false\n"
    )
    return directory


@pytest.mark.parametrize("form", ["--config-path={d} --config-name=my_run", "-cp {d} -cn my_run.yaml"])
def test_main_ppos_config_path_and_name_with_a_users_own_config(form, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    directory = _own_config(tmp_path)
    path = _script(tmp_path, f'python3 -m verl.trainer.main_ppo {form.format(d=directory)} "$@"\n')
    code, out = _check(capsys, path)
    assert code == 1 and "[6.2.7] algorithm.use_kl_in_reward = True" in out, out
    assert "actor_rollout_ref.actor.kl_loss_coef=0.004" in out.strip().splitlines()[-1]
    command = shlex.split(out.strip().splitlines()[-1][len("Fix: "):])
    assert _check(capsys, *command[1:])[0] == 0
    # the same options given to check directly
    code, out = _check(capsys, "-cp", directory, "-cn", "my_run", *command[2:])
    assert code == 0, out


def test_main_ppos_relative_config_path_is_verls_trainer_directory(capsys):
    code, out = _check(capsys, "--config-path=config", "--config-name=ppo_megatron_trainer",
                       *validation.RECIPES[BASELINE])
    assert code == 0 and "OK" in out, out


def test_another_hydra_option_is_not_one_runs_config(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = _check(capsys, _script(tmp_path, f"python3 -m verl.trainer.main_ppo --multirun {RECIPE}\n"))
    assert code == 2 and "'--multirun' is not one run's config" in out
