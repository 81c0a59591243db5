"""The opt-in CPU backend's pieces that need no Ray: opt-in loading, the plugin's exclusion, the
reward, log parsing, the trace, the demo's progress lines and verdict."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from verl_rfpp.cpu import assets, checkpoints, configuration, demo, launch, run_metrics, trace
from verl_rfpp.errors import LaunchError


@pytest.mark.slow
def test_plugin_never_loads_the_cpu_backend():
    code = f"import sys, verl; from verl.trainer.ppo import core_algos; print({configuration.BACKEND!r} in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"


@pytest.mark.slow
def test_cpu_backend_registers_platform_and_rollout_when_asked():
    code = (
        "import verl\n"
        "from verl.plugin.platform.platform_manager import PlatformRegistry\n"
        "from verl.workers.rollout.replica import RolloutReplicaRegistry\n"
        "from verl.workers.rollout.base import get_rollout_class\n"
        "import verl.utils.distributed\n"
        "from verl_rfpp.cpu import patches\n"
        "gloo = next(p for p in patches.TABLE if p.module == patches.DISTRIBUTED)\n"
        "print(PlatformRegistry.get('cpu').__name__, RolloutReplicaRegistry.get('hf_cpu').__name__,"
        " get_rollout_class('hf_cpu').__name__, gloo.applied())\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            env={**configuration.trainer_environment(Path("/tmp"))})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "PlatformCPU HFReplica HFServerAdapter True"


def test_reward_function_known_values():
    assert assets.compute_score("rfpp_copy_digit", " 3 3x", "3") == 1.0 + 2 / 3
    assert assets.compute_score("rfpp_copy_digit", "ab", "3") == 0.0
    assert assets.compute_score("rfpp_copy_digit", "12", "3") == 1.0
    assert assets.compute_score("rfpp_copy_digit", "   ", "3") == 0.0


def test_console_step_lines_are_parsed_for_both_trainers():
    v1 = "(TaskRunnerV1 pid=7) step:2 - actor/kl_loss:0.0106 - rfpp/valid_tokens:64.0 - x/y:-1.5e-08"
    legacy = "(TaskRunner pid=9) step:1 - actor/kl_loss:np.float64(0.0) - num_turns/max:np.int64(2)"
    assert run_metrics.parse_step_line(v1) == (2, {"actor/kl_loss": 0.0106, "rfpp/valid_tokens": 64.0, "x/y": -1.5e-08})
    assert run_metrics.parse_step_line(legacy) == (1, {"actor/kl_loss": 0.0, "num_turns/max": 2.0})
    assert run_metrics.parse_step_line("no metrics here") is None
    # a run's result records each step line's metrics and the driver that printed it
    result = launch.RunResult(returncode=0)
    assert result.read_step("\x1b[36m(TaskRunnerV1 pid=7)\x1b[0m no metrics here") is None
    assert [result.read_step(line) for line in (v1, legacy)] == [run_metrics.parse_step_line(v1),
                                                                run_metrics.parse_step_line(legacy)]
    assert result.steps == {2: {"actor/kl_loss": 0.0106, "rfpp/valid_tokens": 64.0, "x/y": -1.5e-08},
                            1: {"actor/kl_loss": 0.0, "num_turns/max": 2.0}}
    assert result.driver_pids == {7, 9}


@pytest.mark.slow
def test_excluded_plugin_stays_out_although_the_cpu_backend_loads():
    # verl imports verl_rfpp.cpu.backend (VERL_USE_EXTERNAL_MODULES) before its plugins; the backend must not
    # import verl_rfpp.plugin itself, or "verl's built-ins" would silently be ours.
    code = (
        "import sys, verl\n"
        "from verl.trainer.ppo import core_algos as c\n"
        f"print({configuration.BACKEND!r} in sys.modules, 'verl_rfpp.plugin' in sys.modules,"
        " c.ADV_ESTIMATOR_REGISTRY['reinforce_plus_plus'].__module__,"
        " c.ADV_ESTIMATOR_REGISTRY['reinforce_plus_plus_baseline'].__module__)\n"
    )
    for ours, expected in ((False, "True False verl.trainer.ppo.core_algos verl.trainer.ppo.core_algos"),
                           (True, "True True verl_rfpp.adapter.registries verl_rfpp.adapter.registries")):
        env = configuration.trainer_environment(Path("/tmp"), ours=ours)
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().splitlines()[-1] == expected


def test_trace_variable_is_the_plugins():
    from verl_rfpp import plugin

    assert trace.TRACE_ENV == plugin.TRACE_ENV


def _holes_reference(mask):
    count = 0
    for row in mask.tolist():
        ones = [t for t, m in enumerate(row) if m]
        count += bool(ones) and any(not row[t] for t in range(ones[0], ones[-1] + 1))
    return count


def test_interior_holes_counts_rows_with_a_gap_between_valid_tokens():
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0], [0, 1, 1, 1], [1, 0, 0, 1], [0, 1, 0, 1]])
    assert trace.interior_holes(mask) == _holes_reference(mask) == 3
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        mask = torch.rand(7, 9, generator=generator) < 0.6
        assert trace.interior_holes(mask) == _holes_reference(mask)


def test_trace_lines_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv(trace.TRACE_ENV, str(tmp_path / "t.txt"))
    trace.write("tokens", rank=1, rows=8, valid=30, holes=0)
    (line,) = (tmp_path / "t.txt").read_text().splitlines()
    assert trace.lines_of([line], "tokens") == [{"pid": str(__import__("os").getpid()), "rank": "1", "rows": "8",
                                                  "valid": "30", "holes": "0"}]


def test_recipes_of_ours_builtins_and_grpo():
    ours = configuration.recipe("reinforce_plus_plus_baseline")
    builtin = configuration.recipe("reinforce_plus_plus_baseline", ours=False)
    grpo = configuration.recipe("grpo", ours=False)
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=rfpp" in ours
    assert [o for o in builtin if o not in ours] == ["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"]
    assert [o for o in grpo if o not in builtin] == ["algorithm.adv_estimator=grpo"]
    with pytest.raises(LaunchError, match="--ranks 3"):
        configuration.trainer_overrides("reinforce_plus_plus", {"train": "a", "test": "b", "model": "m"}, 2, False,
                                        Path("/tmp"), ranks=3)


def _result(steps=3, ranks=2, estimator="reinforce_plus_plus_baseline", rewards=None, driver=7):
    rewards = rewards or [0.2] * steps
    result = launch.RunResult(returncode=0, driver_pids={driver})
    metrics = {f"rfpp/{name}": 1.0 for name in ("raw_adv_mean", "raw_adv_std", "adv_mean", "adv_std",
                                                  "valid_tokens", "var_floor_used")}
    for step in range(1, steps + 1):
        result.steps[step] = {**metrics, "critic/score/mean": rewards[step - 1], "actor/kl_loss": 0.001,
                              "timing_s/step": 2.5}
        result.trace.append(f"{estimator} pid={driver} valid_tokens=64 raw_adv_std=0.5")
        result.trace += [f"tokens pid={100 + r} rank={r} rows=8 valid=32 holes=0" for r in range(ranks)]
    result.trace += [f"weights pid={200 + r} global_steps={s} abs_sum={1000 + s}" for r in range(ranks)
                     for s in range(steps + 1)]
    return result


def test_demo_verdict_passes_a_complete_run_and_names_each_failure():
    good = demo.judge("reinforce_plus_plus_baseline", _result(), steps=3, ranks=2)
    assert good.passed, good.problems
    assert good.facts["rank_tokens"] == {0: 96, 1: 96} and good.facts["calls"] == 3
    text = demo.summary("reinforce_plus_plus_baseline", _result(), good, 3, 2, False)
    assert text.splitlines()[-1].startswith("PASS") and "rank 0: 96, rank 1: 96" in text

    one_rank = _result()
    one_rank.trace = [line for line in one_rank.trace if "rank=1" not in line]
    assert "not every rank trained" in demo.judge("reinforce_plus_plus_baseline", one_rank, 3, 2).problems[0]

    elsewhere = _result()
    elsewhere.driver_pids = {8}
    assert "not in verl's driver" in demo.judge("reinforce_plus_plus_baseline", elsewhere, 3, 2).problems[0]

    builtin = _result()
    builtin.trace = [line for line in builtin.trace if not line.startswith("reinforce_plus_plus_baseline")]
    assert "computed the advantages 0 times" in demo.judge("reinforce_plus_plus_baseline", builtin, 3, 2).problems[0]

    stale = _result()
    stale.trace = [line.replace("abs_sum=1003", "abs_sum=1002") for line in stale.trace]
    assert "did not follow" in demo.judge("reinforce_plus_plus_baseline", stale, 3, 2).problems[0]

    flat = _result(steps=20, rewards=[0.2] * 20)
    problems = demo.judge("reinforce_plus_plus_baseline", flat, 20, 2).problems
    assert problems == ["the reward did not rise: 0.20 in the first 5 steps, 0.20 in the last 5"]
    rising = _result(steps=20, rewards=[0.2] * 10 + [0.9] * 10)
    assert demo.judge("reinforce_plus_plus_baseline", rising, 20, 2).passed

    crashed = _result()
    crashed.returncode = 1
    del crashed.steps[3]
    verdict = demo.judge("reinforce_plus_plus_baseline", crashed, 3, 2)
    assert verdict.problems[:2] == ["verl's trainer exited with code 1", "verl logged 2 of 3 training steps"]
    assert demo.summary("reinforce_plus_plus_baseline", crashed, verdict, 3, 2, False).splitlines()[-1].startswith(
        "FAIL: verl's trainer exited with code 1; ")


# The end of verl's log when the demo joined a Ray cluster it did not start (issue 22): the
# decisive error is the last exception line, not the exit code.
JOINED_LOG = """ray init kwargs: {'num_cpus': 16, 'num_gpus': 1, 'runtime_env': {...}}
Traceback (most recent call last):
  File "verl/trainer/main_ppo.py", line 74, in run_ppo
    ray.init(**OmegaConf.to_container(ray_init_kwargs))
  File "ray/_private/worker.py", line 1957, in init
    raise ValueError(
ValueError: When connecting to an existing cluster, num_cpus and num_gpus must not be provided.

Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
"""


@pytest.mark.parametrize("log,error", [
    (JOINED_LOG, "ValueError: When connecting to an existing cluster, num_cpus and num_gpus must not be provided."),
    ("(TaskRunner pid=4242) Traceback (most recent call last):\n(TaskRunner pid=4242)   File \"x.py\", line 1\n"
     "(TaskRunner pid=4242) ray.exceptions.RayTaskError(KeyError): ray::TaskRunner.run() 'actor_rollout_ref'\n"
     "(TaskRunner pid=4242) KeyError: 'actor_rollout_ref'\nsome later line\n", "KeyError: 'actor_rollout_ref'"),
    ("Traceback (most recent call last):\n  File \"ray/_private/node.py\", line 440, in __init__\n"
     "Exception: The current node timed out during startup.\n",
     "Exception: The current node timed out during startup."),
], ids=["driver", "ray-actor", "bare-exception"])
def test_a_crashed_demo_names_the_decisive_error(log, error):
    crashed = _result()
    crashed.returncode = 1
    crashed.log = log.splitlines(keepends=True)
    verdict = demo.judge("reinforce_plus_plus_baseline", crashed, 3, 2)
    assert verdict.problems[0] == f"verl's trainer exited with code 1: {error}"
    assert demo.summary("reinforce_plus_plus_baseline", crashed, verdict, 3, 2, False).splitlines()[-1].startswith(
        f"FAIL: verl's trainer exited with code 1: {error}")


def test_closing_lines_name_no_file_of_a_folder_the_demo_removes():
    """Without --out (and on a PASS) the demo removes its folder: no closing line names a file in it."""
    run = _result()
    run.log_path = Path("/tmp/verl-rfpp-demo-x/verl.log")
    run.digests = {3: "ab" * 32}
    good = demo.judge("reinforce_plus_plus_baseline", run, 3, 2)
    kept = demo.summary("reinforce_plus_plus_baseline", run, good, 3, 2, False)
    assert "Every step's metrics: /tmp/verl-rfpp-demo-x/metrics.jsonl." in kept
    removed = demo.summary("reinforce_plus_plus_baseline", run, good, 3, 2, False, files_kept=False)
    assert "/tmp/verl-rfpp-demo-x" not in removed and f"sha256 {'ab' * 32}" in removed


def test_a_failed_checkpoint_write_is_one_line_naming_the_intact_checkpoint(tmp_path):
    """A run stopped by a checkpoint verl could not write (its decisive error names a path under
    ``checkpoints/``: a read-only or full folder) is told in one line with the checkpoint that
    stays; any other failure is not."""
    (tmp_path / checkpoints.CHECKPOINTS).mkdir()
    (tmp_path / checkpoints.CHECKPOINTS / checkpoints.TRACKER).write_text("1")
    failed = _result()
    failed.returncode = 1
    target = tmp_path / checkpoints.CHECKPOINTS / "global_step_2" / "actor"
    failed.log = ["(TaskRunner pid=7) Traceback (most recent call last):\n",
                  f"(TaskRunner pid=7) PermissionError: [Errno 13] Permission denied: '{target}'\n"]
    line = demo.checkpoint_failure(failed, tmp_path)
    folder = tmp_path / checkpoints.CHECKPOINTS
    assert line == (f"verl could not write a checkpoint in {folder} (PermissionError: [Errno 13] Permission denied: "
                    f"'{target}'); the checkpoint of step 1 is intact: make {folder} writable, with free space, and "
                    f"continue with --resume --out {tmp_path}")
    # a full disk (measured: benchmarks/faults.py's disk-full point): torch's error names no path, the
    # traceback runs through verl's checkpoint manager
    manager = "/site-packages/verl/utils/checkpoint/fsdp_checkpoint_manager.py"
    failed.log = ["Traceback (most recent call last):\n",
                  '  File "/site-packages/verl/workers/engine_workers.py", line 725, in save_checkpoint\n',
                  f'  File "{manager}", line 352, in save_checkpoint\n',
                  "    torch.save(optimizer_state_dict, optim_path)\n",
                  "RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 127424 vs 127312\n",
                  "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"]
    assert demo.checkpoint_failure(failed, tmp_path) == (
        f"verl could not write a checkpoint in {folder} (RuntimeError: [enforce fail at inline_container.cc:672] . "
        f"unexpected pos 127424 vs 127312); the checkpoint of step 1 is intact: make {folder} writable, with free "
        f"space, and continue with --resume --out {tmp_path}")
    failed.log = ["Traceback (most recent call last):\n",
                  '  File "/site-packages/verl/trainer/ppo/ray_trainer.py", line 9, in fit\n',
                  "(TaskRunner pid=7) KeyError: 'actor_rollout_ref'\n"]
    assert demo.checkpoint_failure(failed, tmp_path) is None
    assert demo.checkpoint_failure(_result(), tmp_path) is None


def test_the_trainers_temporary_files_stay_in_the_runs_folder(tmp_path, monkeypatch):
    """verl makes a ``ckpt_<hash>.lock`` in the temporary folder for every checkpoint folder it
    creates and never removes it (``verl.utils.fs.local_mkdir_safe``; its name is Python's ``hash``
    of the path, salted per process unless ``PYTHONHASHSEED`` is set): the trainer's TMPDIR is the
    run's folder, so they land there; Ray's sessions stay where the launcher put them."""
    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    env = configuration.trainer_environment(tmp_path)
    assert env["TMPDIR"] == str(tmp_path / configuration.TEMP) and env["RAY_TMPDIR"] == tempfile.gettempdir()
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))
    assert configuration.trainer_environment(tmp_path)["RAY_TMPDIR"] == str(tmp_path / "ray")
    from verl.utils.fs import local_mkdir_safe

    (tmp_path / configuration.TEMP).mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again, as the trainer's processes do
    monkeypatch.setenv("TMPDIR", env["TMPDIR"])
    local_mkdir_safe(str(tmp_path / "checkpoints" / "global_step_1"))
    assert len(list((tmp_path / configuration.TEMP).glob("ckpt_*.lock"))) == 1


def test_a_run_on_its_own_ray_passes_no_address_of_the_users(tmp_path, monkeypatch):
    """A run without --nodes starts its own Ray (``address=local``, Ray's documented way to ignore
    RAY_ADDRESS and the address file of `ray start`) and does not hand RAY_ADDRESS to verl."""
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    paths = {"train": "t", "test": "v", "model": "m"}
    assert "+ray_kwargs.ray_init.address=local" in configuration.trainer_overrides("grpo", paths, 1, False, tmp_path)
    assert "RAY_ADDRESS" not in configuration.trainer_environment(tmp_path)
    joined = configuration.trainer_overrides("grpo", paths, 1, False, tmp_path, address="127.0.0.1:5")
    assert "+ray_kwargs.ray_init.address=127.0.0.1:5" in joined and "+ray_kwargs.ray_init.address=local" not in joined


def test_progress_line_shows_reward_kl_adv_std_and_seconds():
    metrics = {"critic/score/mean": 0.25, "actor/kl_loss": 0.00123, "rfpp/adv_std": 1.0, "timing_s/step": 2.44}
    assert demo.progress_line(3, 40, metrics) == "step  3/40  reward 0.250  kl_loss 0.00123  adv_std 1.000  2.4 s"
    rfpp = {"critic/score/mean": 0.25, "actor/reward_kl_penalty": 0.002}
    assert demo.progress_line(3, 9, rfpp) == "step 3/9  reward 0.250  kl_in_reward 0.00200  adv_std -  - s"


def test_help_is_plain_text(capsys):
    from verl_rfpp.cli import main as cli

    for command in ([], ["demo"], ["curves"]):
        assert cli.main([*command, "--help"]) == 0
        text = capsys.readouterr().out
        assert "usage: verl-rfpp" in text and "``" not in text


# verl's driver output after a WorkerDict was killed with SIGKILL (a 2-rank demo, verl 0.9.1, abridged)
ACTOR_DIED_LOG = """\x1b[36m(WorkerDict pid=4284)\x1b[0m Total steps: 2, num_warmup_steps: 0
Error executing job with overrides: ['algorithm.adv_estimator=reinforce_plus_plus_baseline']
Traceback (most recent call last):
  File "verl/single_controller/ray/base.py", line 56, in __call__
    output = ray.get(output)
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict
\tactor_id: ce4256ec9c0373a43ef61cad01000000
\tpid: 4284
\tname: lQ7XlLWorkerDict_0:0
The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR
"""


def test_ray_s_word_that_a_worker_died_names_it():
    """A death the launcher's watch did not see (verl stopped first; a multi-node run's workers) is
    read from Ray's error in verl's driver; an error of the driver's own is not a worker's death."""
    log = ACTOR_DIED_LOG.splitlines(keepends=True)
    death = launch._death_in_log(log, 1)
    assert (death.pid, death.title, death.after_step) == (4284, "ray::WorkerDict", 1)
    assert not launch._driver_failed(log)
    own = ["Error executing job with overrides: []\n", "Traceback (most recent call last):\n", "KeyError: 'x'\n"]
    assert launch._driver_failed(own) and launch._death_in_log(own, 1) is None


def test_of_workers_gone_at_once_the_one_ray_s_error_names_is_the_one_that_died():
    """Seen in a 2-rank run: the rank killed and the TransferQueueController gone in one look of
    the watch; Ray's error in verl's driver names the rank."""
    result = launch.RunResult(returncode=1, log=ACTOR_DIED_LOG.splitlines(keepends=True))
    result.death = launch.WorkerDeath(1776, "ray::TransferQueueController", 1, 0.0, with_it=[(4284, "ray::WorkerDict")])
    launch._name_death(result, 1)
    assert (result.death.pid, result.death.title) == (4284, "ray::WorkerDict")
    assert result.death.with_it == [(1776, "ray::TransferQueueController")]
    unseen = launch.RunResult(returncode=1, log=result.log)  # verl stopped before the watch looked
    launch._name_death(unseen, 1)
    assert (unseen.death.pid, unseen.death.title, unseen.death.after_step) == (4284, "ray::WorkerDict", 1)


def test_a_worker_ended_by_verls_own_failure_is_not_its_cause(tmp_path):
    """Seen in the fault matrix's ``read-only`` point (benchmarks/faults.py; a loaded machine): verl
    failed to write checkpoint 2 on a read-only mount, its shutdown ended the
    ``TransferQueueController``, and the watch saw that before the driver's error reached the
    launcher. The driver's error of its own (no Ray word of a death) decides: no death, and the
    demo's line is the checkpoint's. With Ray's word that a worker died, the death stays."""
    (tmp_path / checkpoints.CHECKPOINTS).mkdir()
    (tmp_path / checkpoints.CHECKPOINTS / checkpoints.TRACKER).write_text("1")
    target = tmp_path / checkpoints.CHECKPOINTS / "global_step_2"
    log = ["Error executing job with overrides: ['algorithm.adv_estimator=reinforce_plus_plus_baseline']\n",
           "Traceback (most recent call last):\n",
           '  File "verl/trainer/main_ppo.py", line 56, in run_ppo\n',
           "ray.exceptions.RayTaskError(OSError): ray::TaskRunnerV1.run() (pid=19140, ip=127.0.0.1)\n",
           f"OSError: [Errno 30] Read-only file system: '{target}'\n"]
    result = launch.RunResult(returncode=1, log=log, planned_steps=4)
    result.death = launch.WorkerDeath(17311, "ray::TransferQueueController", 1, 0.0)
    launch._name_death(result, 1)
    assert result.death is None
    folder = tmp_path / checkpoints.CHECKPOINTS
    assert demo.checkpoint_failure(result, tmp_path) == (
        f"verl could not write a checkpoint in {folder} (OSError: [Errno 30] Read-only file system: '{target}'); "
        f"the checkpoint of step 1 is intact: make {folder} writable, with free space, and continue with --resume "
        f"--out {tmp_path}")
    died = launch.RunResult(returncode=1, log=[*log, *ACTOR_DIED_LOG.splitlines(keepends=True)])
    died.death = launch.WorkerDeath(4284, "ray::WorkerDict", 1, 0.0)
    launch._name_death(died, 1)
    assert (died.death.pid, died.death.title) == (4284, "ray::WorkerDict")
    stopped = launch.RunResult(returncode=-9, log=log)  # verl did not stop within the grace: the launcher did
    stopped.death = launch.WorkerDeath(17311, "ray::TransferQueueController", 1, 0.0, stopped_by_launcher=True)
    launch._name_death(stopped, 1)
    assert stopped.death is not None


def test_a_dead_worker_is_one_line_naming_it_and_how_to_resume(tmp_path):
    """The demo's one line for a run stopped by a dead Ray worker: which worker, after which step,
    how the run stopped, and the resume command with the run's own options (or why the folder
    cannot resume); verl's traceback stays in verl.log."""
    settings = {"--estimator": "reinforce_plus_plus_baseline", "--legacy": False, "--ranks": 2, "--nodes": 1,
                "--seed": 0, "--multi-turn": False}
    checkpoints.write_run_settings(tmp_path, settings)
    died = _result()
    died.returncode, died.planned_steps, died.save_every = 1, 2, 1
    died.log_path = tmp_path / "verl.log"
    died.death = launch.WorkerDeath(4284, "ray::WorkerDict", 1, 0.0, seconds=7.25)
    line = demo.checkpoint_failure(died, tmp_path)  # the demo prints this one line and exits 1
    assert line == (f"a Ray worker of the run ended while verl trained (ray::WorkerDict pid 4284, after step 1 of 2); "
                    f"verl's trainer stopped (exit 1), and no process of the run was left 7.2 s after; {tmp_path} "
                    f"cannot resume: --resume continues from a checkpoint in {tmp_path / checkpoints.CHECKPOINTS}, and "
                    f"there is none; run with --save-every N first (same --out) (verl's log: {tmp_path / 'verl.log'})")
    for name in ("actor", "data.pt"):
        path = tmp_path / checkpoints.CHECKPOINTS / "global_step_1" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    (tmp_path / checkpoints.CHECKPOINTS / checkpoints.TRACKER).write_text("1")
    died.death.stopped_by_launcher = True
    assert checkpoints.resume_problem(tmp_path, 2, settings) is None
    assert (f"verl did not stop within {launch.WORKER_GRACE_S:.0f} s, so the demo stopped the run, and no process of "
            f"the run was left 7.2 s after; {tmp_path} resumes from the checkpoint of step 1: verl-rfpp demo --resume "
            f"--out {tmp_path} --steps 2 --save-every 1 --ranks 2 (verl's log:"
            ) in demo.checkpoint_failure(died, tmp_path)
    died.returncode, died.death.stopped_by_launcher = 0, False  # workers that end as verl ends a run: no death
    assert demo.checkpoint_failure(died, tmp_path) is None
