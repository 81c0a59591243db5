"""``verl-rfpp check SCRIPT [ARGUMENTS]`` on launch scripts (docs/contract.md sections 6.2, 6.5):
verl's own example scripts (tests/tools/scripts/, copied from verl's repository), the project's
examples/, and scripts of the same shapes. For each: the first verdict and its rule ids, the
printed Fix: command, and that command checked again: OK, with the KL the script had still on
(in the method's form, with the script's coefficient). Scripts are read, never run
(verl_rfpp.cli.scripts); real Hydra composition."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from support.checking import check as _check
from support.checking import kl as _kl

from verl_rfpp import catalog, validation
from verl_rfpp.adapter.compose import compose_verl_config
from verl_rfpp.cli import scripts

pytestmark = pytest.mark.slow  # composes verl's config twice per case

HERE = Path(__file__).resolve().parent
VERL_SCRIPTS = HERE / "scripts"
EXAMPLES = sorted((HERE.parents[1] / "examples").glob("*.sh"))
BASELINE, RFPP = catalog.REINFORCE_PLUS_PLUS_BASELINE.name, catalog.REINFORCE_PLUS_PLUS.name


def _run_config(script, arguments):
    """The config the script runs with ``arguments`` (read as check reads it)."""
    launch, = scripts.read_script(Path(script), arguments).launches
    run = scripts.parse_main_ppo(launch.arguments)
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
def test_every_launcher_is_read_and_nothing_runs(launcher, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "ran"
    path = _script(tmp_path, f'touch {marker}\n{launcher} {RECIPE} "$@"\ntouch {marker}\n')
    code, out = _check(capsys, path, "actor_rollout_ref.rollout.n=1")
    assert code == 1 and "[6.2.1] actor_rollout_ref.rollout.n = 1" in out, out
    assert not marker.exists()
    assert out.strip().splitlines()[-1] == (
        f"Fix: bash {path} actor_rollout_ref.rollout.n=1 actor_rollout_ref.rollout.n=8")


def test_a_script_that_launches_nothing_is_named_exit_2(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = _check(capsys, _script(tmp_path, "echo python3 -m verl.trainer.main_ppo\n", "nothing.sh"))
    assert code == 2 and "launches no run" in out and "verl.trainer.main_ppo" in out


def test_every_run_of_a_script_gets_its_own_verdict_and_the_worst_exit(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    launch = f"python3 -m verl.trainer.main_ppo {RECIPE}"
    body = (f"for n in 8 1; do\n  {launch} actor_rollout_ref.rollout.n=$n\ndone\n"
            f"{launch} && {launch} algorithm.gamma=2\n")
    path = _script(tmp_path, body, "runs.sh")
    code, out = _check(capsys, path)
    headers = [line for line in out.splitlines() if line.startswith("run ")]
    assert code == 1 and headers == [f"run {k} of 4 ({path}:{line}): python3 -m verl.trainer.main_ppo"
                                     for k, line in ((1, 3), (2, 3), (3, 5), (4, 5))], out
    blocks = out.split("\nrun ")
    assert "OK: this config runs" in blocks[0] and "[6.2.1]" in blocks[1] and "OK" in blocks[2]
    assert "[6.2.10]" in blocks[3]


LAUNCH = f"python3 -m verl.trainer.main_ppo {RECIPE}"
# (script body, the reason check must give for not printing the command form) for scripts on which
# `bash SCRIPT FIXES` would not fix the run (issue 38 item 3): each run by bash, the first override
# appended lands elsewhere than at the end of main_ppo's arguments, or the script's defaults go away
UNFIXABLE_BY_COMMAND = [
    (f"{LAUNCH} actor_rollout_ref.rollout.n=1\n", r"main_ppo's line at \S*run\.sh:2 gets none of the command's \$1"),
    (f'N=${{1:-8}}\n{LAUNCH} actor_rollout_ref.rollout.n=1 trainer.total_epochs=$N "$@"\n',
     r"the script makes `trainer\.total_epochs=<\$1>` of the command's \$1 on main_ppo's line at \S*run\.sh:3"),
    (f'ENGINE=${{1:-vllm}}\n{LAUNCH} actor_rollout_ref.rollout.n=1 actor_rollout_ref.rollout.name=$ENGINE "$@"\n',
     r"makes `actor_rollout_ref\.rollout\.name=<\$1>` of the command's \$1"),
    (f'MODEL=$1; shift\n{LAUNCH} actor_rollout_ref.rollout.n=1 actor_rollout_ref.model.path=$MODEL "$@"\n',
     r"does not get the command's \$1 as given; the script makes `actor_rollout_ref\.model\.path=<\$1>`"),
    (f'python3 -m verl.trainer.main_ppo --config-name=${{1:-ppo_trainer}} {RECIPE} actor_rollout_ref.rollout.n=1 '
     '"$@"\n', r"makes `--config-name=<\$1>` of the command's \$1"),
    (f'{LAUNCH} algorithm.use_kl_in_reward=True actor_rollout_ref.actor.use_kl_loss=False "${{@:2}}"\n',
     r"main_ppo's line at \S*run\.sh:2 does not get the command's \$1 as given"),
    ('if [ $# -eq 0 ]; then set -- actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.02; '
     f'fi\n{LAUNCH} actor_rollout_ref.actor.use_kl_loss=False actor_rollout_ref.rollout.n=1 "$@"\n',
     r"gets KL: off instead of KL: k2 loss, coefficient 0\.02 .*loses actor_rollout_ref\.actor\.kl_loss_coef=0\.02"),
]


@pytest.mark.parametrize("body,reason", UNFIXABLE_BY_COMMAND,
                         ids=["no-args", "N=1-or-8", "ENGINE=1-or-vllm", "MODEL=1-shift", "config-name=1",
                              "args-from-2",
                              "set-defaults"])
def test_a_fix_command_is_printed_only_when_check_verified_it(body, reason, capsys, tmp_path, monkeypatch):
    """A refusal's Fix: is `bash SCRIPT ...` only when the script, read again with those arguments, runs
    every run accepted with the KL kept; here it does not, so the Fix: gives the overrides for main_ppo's
    line, naming it, and the note why the command would not work. Both claims are checked: the command
    form is not an accepted run with the KL the line form gives, and the line form is."""
    monkeypatch.chdir(tmp_path)
    path = _script(tmp_path, body)
    code, out = _check(capsys, path)
    *_, note, fix = out.strip().splitlines()
    line = len(body.splitlines()) + 1  # the launch is the script's last line (after set -x)
    assert code == 1 and fix.startswith(f"Fix: put at the end of main_ppo's line ({path}:{line}): "), out
    fixes = shlex.split(fix.split("): ", 1)[1])
    assert note.startswith(f"note: `bash {path} {shlex.join(fixes)}` would not fix this: "), note
    assert re.search(reason, note), note
    by_command = _check(capsys, path, *fixes)
    lines = path.read_text().splitlines()
    lines[line - 1] += " " + shlex.join(fixes)
    path.write_text("\n".join(lines) + "\n")
    code, out = _check(capsys, path)
    kept = re.search(r"KL: .*\.$", out).group()
    assert code == 0 and "OK: this config runs" in out and "coefficient" in kept, out
    assert by_command[0] != 0 or kept not in by_command[1], by_command


def test_a_fix_command_covers_every_run_of_the_script(capsys, tmp_path, monkeypatch):
    """Two refused runs, each with its own fix: one command with both fixes, verified for both."""
    monkeypatch.chdir(tmp_path)
    path = _script(tmp_path, f'{LAUNCH} actor_rollout_ref.rollout.n=1 "$@"\n{LAUNCH} algorithm.gamma=2 "$@"\n')
    code, out = _check(capsys, path)
    fixes = [line for line in out.splitlines() if line.startswith("Fix: ")]
    assert code == 1 and fixes == [f"Fix: bash {path} actor_rollout_ref.rollout.n=8 algorithm.gamma=1.0"] * 2, out
    assert _check(capsys, *shlex.split(fixes[0])[2:])[0] == 0


def _own_config(tmp_path, searchpath=True):
    directory = tmp_path / "my_config"
    directory.mkdir()
    (directory / "my_run.yaml").write_text(
        ("hydra:\n  searchpath:\n    - pkg://verl.trainer.config\n" if searchpath else "") +
        "defaults:\n  - ppo_trainer\n  - _self_\n"
        "algorithm:\n  adv_estimator: reinforce_plus_plus_baseline\n  use_kl_in_reward: true\n"
        "  kl_ctrl:\n    kl_coef: 0.004\n"
        "actor_rollout_ref:\n  rollout:\n    n: 4\n  actor:\n    use_kl_loss: false\n"
    )
    return directory


@pytest.mark.parametrize("form", ["--config-path={d} --config-name=my_run", "-cp {d} -cn my_run.yaml",
                                  "--config-dir {d} --config-name my_run"])
def test_main_ppos_config_path_and_name_with_a_users_own_config(form, capsys, tmp_path, monkeypatch):
    """--config-dir adds DIR to verl's config search path (Hydra): its config needs no searchpath of its own."""
    monkeypatch.chdir(tmp_path)
    directory = _own_config(tmp_path, searchpath="config-dir" not in form)
    path = _script(tmp_path, f'python3 -m verl.trainer.main_ppo {form.format(d=directory)} "$@"\n')
    code, out = _check(capsys, path)
    assert code == 1 and "[6.2.7] algorithm.use_kl_in_reward = True" in out, out
    assert "actor_rollout_ref.actor.kl_loss_coef=0.004" in out.strip().splitlines()[-1]
    command = shlex.split(out.strip().splitlines()[-1][len("Fix: "):])
    assert _check(capsys, *command[1:])[0] == 0
    if "config-dir" not in form:  # the same options given to check directly
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


def test_the_scripts_own_options_and_positional_arguments_are_its_own(capsys, tmp_path, monkeypatch):
    """Every word after SCRIPT is the script's ($1, "$@"), options included; no hidden argument reaches $1."""
    monkeypatch.chdir(tmp_path)
    body = ('ENGINE=${1:-vllm}\nshift || true\nwhile [[ $# -gt 0 ]]; do\n  case "$1" in\n'
            '    --n) N="$2"; shift 2 ;;\n    *) break ;;\n  esac\ndone\n'
            f'python3 -m verl.trainer.main_ppo {RECIPE} actor_rollout_ref.rollout.name=$ENGINE '
            'actor_rollout_ref.rollout.n=${N:-8} "$@"\n')
    path = _script(tmp_path, body)
    code, out = _check(capsys, path, "sglang", "--n", "1", "trainer.total_epochs=3")
    assert code == 1 and "[6.2.1] actor_rollout_ref.rollout.n = 1" in out, out
    assert out.strip().splitlines()[-1] == (
        f"Fix: bash {path} sglang --n 1 trainer.total_epochs=3 actor_rollout_ref.rollout.n=8")
    code, out = _check(capsys, path, "sglang", "--n", "1", "trainer.total_epochs=3", "actor_rollout_ref.rollout.n=8")
    assert code == 0 and "OK: this config runs" in out, out
    code, out = _check(capsys, path)
    assert code == 0, out


def test_the_scripts_exports_decide_what_verl_loads(capsys, tmp_path, monkeypatch):
    """contract 6.5: an export that excludes the plugin is a refusal naming its line; a user's estimator
    registered by the script's own modules (VERL_USE_EXTERNAL_MODULES) is not read as a misspelling
    once check is allowed to import them (--import-user-modules), exit 2 before."""
    monkeypatch.chdir(tmp_path)
    path = _script(tmp_path, f"export VERL_USE_EXTERNAL_PLUGINS=none\npython3 -m verl.trainer.main_ppo {RECIPE}\n")
    code, out = _check(capsys, path)
    assert code == 1 and "excluded by VERL_USE_EXTERNAL_PLUGINS='none'" in out, out
    assert f"VERL_USE_EXTERNAL_PLUGINS='none' ({path}:2)" in out
    (tmp_path / "my_estimator.py").write_text(
        "from verl.trainer.ppo.core_algos import register_adv_est\n\n"
        "@register_adv_est('reinforce_plus_plus_baselin')\ndef mine(*args, **kwargs):\n    raise NotImplementedError\n")
    body = (f"export PYTHONPATH={tmp_path}\nexport VERL_USE_EXTERNAL_MODULES=my_estimator\n"
            f"python3 -m verl.trainer.main_ppo {RECIPE} algorithm.adv_estimator=reinforce_plus_plus_baselin\n")
    mine = _script(tmp_path, body, "mine.sh")
    code, out = _check(capsys, mine)
    assert code == 2 and "--import-user-modules" in out, out  # the module is not imported unless asked
    code, out = _check(capsys, "--import-user-modules", mine)
    assert code == 0 and "not a verl-rfpp estimator" in out, out
    code, out = _check(capsys, *validation.RECIPES[BASELINE], "algorithm.adv_estimator=reinforce_plus_plus_baselin")
    assert code == 1 and "did you mean" in out  # the same name without the script's modules


# Scripts that start scripts (issue 49 item 3; docs/contract.md section 6.5). What each does under
# bash is judged in tests/tools/differential/children/; here: the lines check prints.
STAGE = f'python3 -m verl.trainer.main_ppo {RECIPE} actor_rollout_ref.rollout.n=$1\n'


def _read(tmp_path, body, name="run.sh"):
    path = _script(tmp_path, body, name)
    return scripts.read_script(path, [], environ={"PATH": "/usr/bin", "HOME": str(tmp_path)}, cwd=str(tmp_path))


def test_a_script_that_a_script_starts_is_read_and_its_runs_are_named_by_its_own_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stage2.sh").write_text("# the second stage\n" + STAGE)
    path = _script(tmp_path, f"{LAUNCH} actor_rollout_ref.rollout.n=8\n/bin/bash stage2.sh 1\n")
    code, out = _check(capsys, path)
    headers = [line for line in out.splitlines() if line.startswith("run ")]
    assert code == 1 and headers == [f"run 1 of 2 ({path}:2): python3 -m verl.trainer.main_ppo",
                                     "run 2 of 2 (stage2.sh:2): python3 -m verl.trainer.main_ppo"], out
    assert f"assumed: {path}:3: `/bin/bash stage2.sh 1` starts stage2.sh, read from this machine" in out
    assert out.strip().splitlines()[-1] == "Fix: put at the end of main_ppo's line (stage2.sh:2): " \
                                           "actor_rollout_ref.rollout.n=8", out


@pytest.mark.parametrize("command,named", [
    ("python3 train.py --n 1", "the Python file train.py"),
    ("python -u -W ignore my_launch.py", "the Python file my_launch.py"),
    ("python3 -m my_pkg.train", "the Python module my_pkg.train"),
    ("torchrun --nproc_per_node=8 train.py", "what torchrun starts"),
    ("deepspeed --num_gpus 8 train.py", "what deepspeed starts"),
    ("accelerate launch train.py", "what accelerate starts"),
    ("uv run train.py", "what uv starts"),
    ("ray job submit --address=http://h:8265 -- python3 train.py", "what ray starts"),
    ("srun --nodes=2 python3 train.py", "what srun starts"),
    ("sbatch job.sh", "what sbatch starts"),
    ("sudo -E bash stage.sh", "what sudo starts"),
    ("bash -c './stage.sh 1'", "what bash starts"),
    ("stage2.sh 1", "the program stage2.sh"),
    ("nohup ./train.py &", "the program ./train.py"),
])
def test_a_program_check_does_not_follow_that_may_start_main_ppo_is_an_assumed_line(command, named, tmp_path):
    (tmp_path / "train.py").write_text("#!/usr/bin/env python3\nimport subprocess\n")
    (tmp_path / "train.py").chmod(0o755)
    reading = _read(tmp_path, f"{command}\n{LAUNCH}\n")
    assert [note for note in reading.assumptions if "starts no main_ppo run" in note] == [
        f"{tmp_path / 'run.sh'}:2: `{shlex.join(shlex.split(command.rstrip(' &')))}` starts no main_ppo run "
        f"(check does not read {named}; check it on its own)"], reading.assumptions


@pytest.mark.parametrize("command", ["python3 -c 'import torch'", "python3 -m pip install verl", "nvidia-smi -L",
                                     "cp run.sh backup.sh", "srun --nodes=1 ray start --head", "bash -c 'exit 0'",
                                     "bash -ec 'exit 0'", "bash --version"])
def test_a_command_that_starts_no_script_gets_no_such_line(command, tmp_path):
    reading = _read(tmp_path, f"{command}\n{LAUNCH}\n")
    assert not [note for note in reading.assumptions if "starts no main_ppo run" in note], reading.assumptions


@pytest.mark.parametrize("body,why", [
    ("sh stage.sh 1\n", "sh is not bash"),
    ("/bin/dash stage.sh 1\n", "dash is not bash"),
    ("./posix.sh 1\n", "sh is not bash"),
    ("bash -l stage.sh 1\n", "check does not model bash's option -l"),
    ("bash --posix stage.sh 1\n", "check does not model bash's option --posix"),
    ("bash missing.sh 1\n", "missing.sh is not a file here (bash then searches PATH for it)"),
    ("./missing.sh 1\n", "./missing.sh is not a file here"),
    ("./noexec.sh 1\n", "./noexec.sh is not executable here"),
    ("./two_options.sh 1\n", "check does not model bash's option -e -u"),  # Linux: one argument, bash's error
    ("bash < stage.sh\n", "this shell reads its commands from standard input"),
    ("A=(1 2)\nexport A\nbash stage.sh 1\n", "the array A is exported"),
    ("export SHELLOPTS\nbash stage.sh 1\n", "started with SHELLOPTS exported"),
    ("bash recurse.sh\n", "scripts start scripts deeper than 10"),
    ("bash evals.sh\n", "check does not run or model what `eval` does, in {tmp}/evals.sh:2: eval \"$X\"; it is "
                         "started by this line"),
    ("echo x > stage.sh\nbash stage.sh 1\n", "this starts a file the script may have written"),
])
def test_a_script_check_cannot_follow_is_exit_2_naming_the_line(body, why, tmp_path):
    for name, text, mode in (("stage.sh", STAGE, 0o644), ("noexec.sh", "#!/bin/bash\n" + STAGE, 0o644),
                             ("two_options.sh", "#!/bin/bash -e -u\n" + STAGE, 0o755),
                             ("posix.sh", "#!/bin/sh\n" + STAGE, 0o755),
                             ("recurse.sh", 'bash "$0"\n', 0o644), ("evals.sh", 'X=:\neval "$X"\n', 0o644)):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(mode)
    with pytest.raises(scripts.ScriptError) as error:
        _read(tmp_path, body)
    line = len(body.splitlines()) + 1  # the command is the script's last line (after set -x)
    assert str(error.value).startswith(f"{tmp_path / 'run.sh'}:{line}: check cannot read this exactly ("), error.value
    assert why.format(tmp=tmp_path) in str(error.value), error.value
