"""Build and run verl's real ``main_ppo`` on the CPU with the tiny local assets."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from verl_rfpp import validation
from verl_rfpp.cpu import assets

from verl_rfpp.plugin import TRACE_ENV


def trainer_overrides(estimator: str, paths: dict, steps: int, legacy: bool, out_dir: Path) -> list[str]:
    """Our validated recipe plus what a 2-core CPU run of the tiny model needs."""
    samples = 4
    overrides = [o for o in validation.RECIPES[estimator] if not o.startswith("actor_rollout_ref.rollout.n=")]
    reward_module = Path(assets.__file__).resolve()
    for role in ("actor", "ref"):
        overrides += [
            f"actor_rollout_ref.{role}.strategy=fsdp2",  # FSDP1 insists on an accelerator device id
            f"actor_rollout_ref.{role}.fsdp_config.use_torch_compile=False",
            f"actor_rollout_ref.{role}.fsdp_config.model_dtype=fp32",
            f"actor_rollout_ref.{role}.fsdp_config.dtype=float32",
        ]
    overrides += [
        f"actor_rollout_ref.rollout.n={samples}",
        f"data.train_files={paths['train']}",
        f"data.val_files={paths['test']}",
        "data.train_batch_size=4",
        "data.max_prompt_length=16",
        "data.max_response_length=4",
        "data.dataloader_num_workers=0",
        f"actor_rollout_ref.model.path={paths['model']}",
        "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.rollout.name=hf_cpu",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.calculate_log_probs=False",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
        f"reward.custom_reward_function.path={reward_module}",
        "reward.custom_reward_function.name=compute_score",
        "reward.num_workers=1",
        "actor_rollout_ref.rollout.agent.num_workers=1",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        f"trainer.default_local_dir={out_dir / 'checkpoints'}",
        f"trainer.use_v1={not legacy}",
        "+ray_kwargs.ray_init.num_cpus=8",
        "+ray_kwargs.ray_init.num_gpus=1",
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    ]
    return overrides


def trainer_environment(out_dir: Path) -> dict[str, str]:
    """Switch the CPU backend on in every verl process (inherited by Ray's workers)."""
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)  # Ray refuses fake GPUs with an empty device list
    modules = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    env.update({
        "VERL_PLATFORM": "cpu",
        "VERL_USE_EXTERNAL_MODULES": ",".join(dict.fromkeys(modules + ["verl_rfpp.cpu"])),
        "VERL_ENGINE_DEVICE": "cuda",  # the FSDP engine registers for cuda/npu only; it runs on "cpu"
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "RAY_DEDUP_LOGS": "0",
        TRACE_ENV: str(out_dir / "trace.txt"),
    })
    return env


def command(estimator: str, out_dir: Path, steps: int = 2, legacy: bool = False) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` of one CPU training run; builds the assets under ``out_dir/assets``."""
    out_dir = Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = assets.build_all(out_dir / "assets")
    argv = [sys.executable, "-m", "verl.trainer.main_ppo", *trainer_overrides(estimator, paths, steps, legacy, out_dir)]
    return argv, trainer_environment(out_dir)


def parse_step_line(line: str) -> Optional[tuple[int, dict[str, float]]]:
    """verl's console logger line ``step:N - key:value - ...`` as ``(N, {key: value})``."""
    match = re.search(r"step:(\d+) - (.*)$", line)
    if not match:
        return None
    metrics = {}
    for part in match.group(2).split(" - "):
        key, _, raw = part.partition(":")
        raw = re.sub(r"np\.\w+\((.*)\)", r"\1", raw.strip())  # the legacy trainer logs np.float64(x)
        number = re.search(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", raw)
        if key and number:
            metrics[key.strip()] = float(number.group(0))
    return int(match.group(1)), metrics


@dataclass
class RunResult:
    """What one CPU run of verl showed: exit code, per-step metrics, the trace, the driver pid."""

    returncode: int
    steps: dict[int, dict[str, float]] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)
    driver_pids: set[int] = field(default_factory=set)
    log: list[str] = field(default_factory=list)


def run(estimator: str, out_dir: Path, steps: int = 2, legacy: bool = False, echo: bool = True,
        timeout: float = 900) -> RunResult:
    """Run verl's ``main_ppo`` on the CPU, streaming its log; collect metrics and the trace."""
    argv, env = command(estimator, out_dir, steps, legacy)
    trace_path = Path(env[TRACE_ENV])
    trace_path.unlink(missing_ok=True)
    result = RunResult(returncode=-1)
    # A session of its own, so a timeout also kills the Ray processes the trainer started.
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               cwd=out_dir, bufsize=1, start_new_session=True)
    # The watchdog fires even when a hung trainer prints nothing (a deadline checked per line would not).
    watchdog = threading.Timer(timeout, os.killpg, args=(process.pid, signal.SIGKILL))
    watchdog.start()
    assert process.stdout is not None
    for line in process.stdout:
        result.log.append(line)
        if echo:
            sys.stdout.write(line)
        parsed = parse_step_line(line)
        if parsed:
            result.steps[parsed[0]] = parsed[1]
            driver = re.search(r"\((TaskRunner\w*) pid=(\d+)\)", line)
            if driver:
                result.driver_pids.add(int(driver.group(2)))
    result.returncode = process.wait()
    watchdog.cancel()
    if trace_path.exists():
        result.trace = trace_path.read_text().splitlines()
    return result


def summary(estimator: str, result: RunResult) -> str:
    """The demo's closing lines: who computed the advantages where, and the per-step metrics."""
    lines = ["", "=" * 78, f"verl-rfpp demo: {estimator}, exit code {result.returncode}"]
    calls = [line for line in result.trace if line.startswith(estimator + " ")]
    pids = sorted({int(re.search(r"pid=(\d+)", line).group(1)) for line in calls})
    where = ", ".join(f"pid {pid}{' (verl driver: TaskRunner)' if pid in result.driver_pids else ''}" for pid in pids)
    lines.append(f"advantages computed by verl_rfpp's {estimator} in {where or 'no process'} "
                 f"({len(calls)} calls)")
    keys = ["critic/score/mean", "actor/kl_loss", "actor/reward_kl_penalty", "rfpp/raw_adv_mean",
            "rfpp/raw_adv_std", "rfpp/adv_mean", "rfpp/adv_std", "rfpp/valid_tokens", "rfpp/var_floor_used"]
    for step, metrics in sorted(result.steps.items()):
        shown = " ".join(f"{key.split('/', 1)[1] if key.startswith('rfpp/') else key}={metrics[key]:.4g}"
                         for key in keys if key in metrics)
        lines.append(f"step {step}: {shown}")
    weights = [line for line in result.trace if line.startswith("weights ")]
    if weights:
        lines.append(f"weight syncs to the rollout: {len(weights)} ({weights[0].split()[-1]} -> {weights[-1].split()[-1]})")
    return "\n".join(lines)
